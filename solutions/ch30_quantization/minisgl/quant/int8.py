"""Weight-only INT8: each output row of a weight stored as int8 with one float scale (SGLang's torchao `int8wo`).

The activations stay in the model's dtype; only the weight shrinks, 4x against float32 and 2x against bfloat16.
A decode step reads every weight once per token and does little arithmetic with it, so reading a quarter of the
bytes is where the time goes. The multiply needs no dequantized copy of the weight: the row scale is a constant of
output column o, so x W^T = (x Q^T) * s, one scale per output after the matmul.

Which multiply: on a GPU, for decode-sized batches, the course's Triton kernel (kernel/triton/int8_mm.py), which
reads the int8 codes and widens them in registers; on a CPU torch's INT8 kernel (`torch._weight_int8pack_mm`) for
decode-sized batches (on a GPU too where Triton is switched off and this torch has a CUDA kernel for it, probed once
per device); otherwise the codes are cast to the activations' dtype and multiplied densely, which is right
everywhere but reads more bytes than it saves.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

INT8_MAX = 127  # symmetric: -128 is never used, so -q is always representable and 0 maps to 0


def quantize_int8_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [out, in] (float) -> (q int8 [out, in], scale float32 [out]) with weight ~ q * scale[:, None]."""
    # TODO(ch30): one scale per OUTPUT row: amax of the row's absolute values / 127 (an all-zero row would divide
    # by zero: give it scale 1). q = round-to-nearest(weight / scale), clamped to [-127, 127] (symmetric: never
    # -128), as int8. Compute in float32; return the scales as float32 of shape [out].
    # >>> solution
    w = weight.float()
    amax = w.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))
    q = torch.round(w / scale[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale
    # <<< solution


# torch's weight-only INT8 kernel reads each weight row once per row of x: it wins while x has few rows (a decode
# step) and loses to one dense multiply beyond that (measured on a CPU, 1536x576, one thread: 48 us against 139 us for
# float32 at 1 row, bfloat16 activations; 175 us against 110 us at 8 rows).
KERNEL_MAX_ROWS = 8
_CUDA_KERNEL: dict[int, bool] = {}  # per CUDA device: whether torch has the kernel there (asked at quantize time)


def probe_cuda_kernel(device: torch.device) -> bool:
    """Whether torch._weight_int8pack_mm runs on this CUDA device and computes x (q s)^T. Asked once per device when
    a layer is quantized (never while a CUDA graph is being captured: the check reads a result on the host)."""
    index = torch.device(device).index or 0
    if index not in _CUDA_KERNEL:
        g = torch.Generator(device=device).manual_seed(0)
        x = torch.randn(2, 64, device=device, generator=g).bfloat16()
        q = torch.randint(-127, 128, (32, 64), device=device, generator=g, dtype=torch.int8)
        s = torch.rand(32, device=device, generator=g).bfloat16()
        try:
            y = torch._weight_int8pack_mm(x, q, s).float()
            want = (x.float() @ q.float().t()) * s.float()
            _CUDA_KERNEL[index] = bool(((y - want).abs() <= 2.0**-6 * (x.float().abs() @ q.float().abs().t())
                                        * s.float() + 1e-3).all())
        except (RuntimeError, NotImplementedError):  # no CUDA kernel in this torch
            _CUDA_KERNEL[index] = False
    return _CUDA_KERNEL[index]


# On a GPU the course's Triton kernel (kernel/triton/int8_mm.py) reads the int8 codes directly up to this many rows:
# decode steps and small chunks, where the weight's bytes are the time; longer prefills are dense multiplies.
TRITON_MAX_ROWS = 64


def _fast_multiply(x: torch.Tensor):
    """The INT8 kernel for x's rows, or None for the dense fallback."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if not (x.dtype in (torch.float32, torch.bfloat16) and rows > 0):
        return None
    if x.device.type == "cuda" and rows <= TRITON_MAX_ROWS:
        from minisgl.kernel.triton import use_triton

        if use_triton(x):
            return _int8_triton
    if rows > KERNEL_MAX_ROWS:
        return None
    if x.device.type == "cpu" or (x.device.type == "cuda" and _CUDA_KERNEL.get(x.device.index or 0, False)):
        return _int8_kernel
    return None


def _int8_triton(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    from minisgl.kernel.triton.int8_mm import int8_mm_triton

    y = int8_mm_triton(x.reshape(-1, x.shape[-1]), qweight, scale)
    return y.view(*x.shape[:-1], qweight.shape[0])


def _int8_kernel(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """torch._weight_int8pack_mm with bfloat16 rows and scales: its fast path on a CPU (float32 rows take a slow
    one)."""
    rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
    y = torch._weight_int8pack_mm(rows, qweight, scale.to(torch.bfloat16))
    return y.to(x.dtype).view(*x.shape[:-1], qweight.shape[0])


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x (q * scale)^T + bias for x [..., in], qweight int8 [out, in], scale [out]; y in x's dtype."""
    if (multiply := _fast_multiply(x)) is not None:
        y = multiply(x, qweight, scale)
        return y if bias is None else y + bias
    # TODO(ch30): the scale belongs to the output column, so multiply by it AFTER the matmul: x @ q^T with q cast to
    # x's dtype (F.linear), times the scale (in x's dtype), then add the bias, which is stored unscaled.
    # >>> solution
    y = F.linear(x, qweight.to(x.dtype)) * scale.to(x.dtype)
    return y if bias is None else y + bias
    # <<< solution
