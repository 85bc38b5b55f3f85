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


def _cpu_kernel_applies(x: torch.Tensor) -> bool:
    """torch's weight-only INT8 kernel on a CPU; fast with bfloat16 activations (measured: 48 us against 139 us for
    a float32 576x1536 multiply at batch 1, one thread; float32 activations take a slow path, 583 us)."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16)


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x (q * scale)^T + bias for x [..., in], qweight int8 [out, in], scale [out]; y in x's dtype."""
    # TODO(ch30): the scale belongs to the output column, so multiply by it AFTER the matmul (x @ q^T, with q cast to
    # x's dtype), then add the bias, which is stored unscaled. On a CPU, torch._weight_int8pack_mm(rows, q, scale)
    # does the multiply and the scaling in one kernel: give it 2-D bfloat16 rows and bfloat16 scales (its fast
    # path) and cast the result back to x's dtype.
    raise NotImplementedError("TODO(ch30): int8_linear")
