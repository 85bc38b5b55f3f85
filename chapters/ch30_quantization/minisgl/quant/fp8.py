"""FP8 (e4m3): weights and activations in 8-bit floats with float32 scales (SGLang's and vLLM's `fp8`, W8A8).

float8_e4m3fn has 3 mantissa bits (a relative rounding error of at most 2^-4) and a largest finite value of 448;
it has no infinity, so a value past 448 does not saturate on the cast: it becomes NaN. Every cast therefore divides
by a scale that maps the tensor's range into [-448, 448] and clamps first. Weights get their scales once, at load
time (per output channel, or one per tensor); activations get theirs at every call from their own absolute maximum
(dynamic, per token), so no calibration data is needed. The multiply is torch._scaled_mm on a GPU that has FP8
tensor cores (H100, H200: compute capability 8.9 and up); elsewhere the same numbers are computed by dequantizing to
float32 first, which checks the arithmetic but is no faster.
"""

from __future__ import annotations

from functools import lru_cache

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448.0
_TINY = 1e-12  # the scale of an all-zero tensor or row: anything positive maps zeros to zero


def fp8_scale(x: torch.Tensor, per_row: bool) -> torch.Tensor:
    """amax / 448 as float32: one scale for the tensor (shape []) or one per row of a 2-D tensor (shape [rows, 1])."""
    amax = x.abs().amax(dim=-1, keepdim=True) if per_row else x.abs().amax()
    return (amax.float() / FP8_MAX).clamp(min=_TINY)


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """x / scale as float8_e4m3fn (scale broadcasts against x); x ~ result.float() * scale."""
    # TODO(ch30): divide by the scale in float32, clamp to [-FP8_MAX, FP8_MAX] BEFORE the cast (e4m3fn has no
    # infinity: a value past 448 would become NaN), then cast to FP8.
    raise NotImplementedError("TODO(ch30): quantize_fp8")


@lru_cache(maxsize=None)
def _fp8_tensor_cores(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (8, 9)


def scaled_mm_applies(x: torch.Tensor, qweight: torch.Tensor) -> bool:
    """torch._scaled_mm's FP8 kernels: CUDA with compute capability 8.9+, both matrix dims multiples of 16."""
    if x.device.type != "cuda" or not _fp8_tensor_cores(x.device.index or 0):
        return False
    out_features, in_features = qweight.shape
    return in_features % 16 == 0 and out_features % 16 == 0


def fp8_linear(x: torch.Tensor, qweight: torch.Tensor, weight_scale: torch.Tensor,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x W^T + bias with W ~ qweight (FP8 [out, in]) * weight_scale ([] per tensor or [out] per channel) and x
    quantized per token at the call. y in x's dtype."""
    rows = x.reshape(-1, x.shape[-1])
    x_scale = fp8_scale(rows, per_row=True)  # [rows, 1]: each token its own range
    xq = quantize_fp8(rows, x_scale)
    w_scale = weight_scale.float().reshape(1, -1).expand(1, qweight.shape[0])  # [1, out] (a per-tensor scale too)
    if scaled_mm_applies(x, qweight):
        # Row-wise scales (one per token of x, one per output of W) need a bfloat16 result; W^T is column-major,
        # the layout the kernel wants for its second operand.
        y = torch._scaled_mm(xq, qweight.t(), scale_a=x_scale, scale_b=w_scale.contiguous(),
                             out_dtype=torch.bfloat16)
    else:
        y = (xq.float() * x_scale) @ (qweight.float() * w_scale.t()).t()
    y = y.to(x.dtype).view(*x.shape[:-1], qweight.shape[0])
    return y if bias is None else y + bias
