"""Weight-only INT8: each output row of a weight stored as int8 with one float scale (SGLang's torchao `int8wo`).

The activations stay in the model's dtype; only the weight shrinks, 4x against float32 and 2x against bfloat16.
A decode step reads every weight once per token and does little arithmetic with it, so reading a quarter of the
bytes is where the time goes. The multiply needs no dequantized copy of the weight: the row scale is a constant of
output column o, so x W^T = (x Q^T) * s, one scale per output after the matmul.
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
    raise NotImplementedError("TODO(ch30): quantize_int8_per_channel")


# torch's weight-only INT8 kernel on a CPU reads each weight row once per row of x: it wins while x has few rows
# (a decode step) and loses to one dense multiply beyond that (measured, 1536x576, one thread: 48 us against 139 us
# for float32 at 1 row, bfloat16 activations; 175 us against 110 us at 8 rows).
CPU_KERNEL_MAX_ROWS = 8


def _cpu_kernel_applies(x: torch.Tensor) -> bool:
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and 0 < rows <= CPU_KERNEL_MAX_ROWS


def _int8_cpu_kernel(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """torch._weight_int8pack_mm with bfloat16 rows and scales: its fast path (float32 rows take a slow one)."""
    rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
    y = torch._weight_int8pack_mm(rows, qweight, scale.to(torch.bfloat16))
    return y.to(x.dtype).view(*x.shape[:-1], qweight.shape[0])


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x (q * scale)^T + bias for x [..., in], qweight int8 [out, in], scale [out]; y in x's dtype."""
    if _cpu_kernel_applies(x):
        y = _int8_cpu_kernel(x, qweight, scale)
        return y if bias is None else y + bias
    # TODO(ch30): the scale belongs to the output column, so multiply by it AFTER the matmul: x @ q^T with q cast to
    # x's dtype (F.linear), times the scale (in x's dtype), then add the bias, which is stored unscaled.
    raise NotImplementedError("TODO(ch30): int8_linear")
