"""SwiGLU's gate, silu(gate) * up, as one Triton kernel.

In torch it is a chunk, a SiLU and a multiply: two launches, and a [tokens, intermediate] temporary written
and read back in between. Here a program reads its share of both halves once and writes the product once,
with torch's roundings: the SiLU is rounded to the model dtype before the multiply, as F.silu's output is.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(X, Out, n_cols, stride_x, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(X + row * stride_x + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    dtype = Out.dtype.element_ty
    silu = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
    tl.store(Out + row * stride_o + cols, (silu * up).to(dtype), mask=mask)


def silu_and_mul(x: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """Same result and dtype as torch_ops.silu_and_mul: x [..., 2n] = [gate | up] -> [..., n]."""
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension holds gate and up halves: it must be even, got {x.shape[-1]}")
    n = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    out = torch.empty(x2.shape[0], n, dtype=x.dtype, device=x.device)
    if x2.shape[0] and n:
        block = min(block, triton.next_power_of_2(n))
        _silu_and_mul_kernel[(x2.shape[0], triton.cdiv(n, block))](x2, out, n, x2.stride(0), out.stride(0),
                                                                   BLOCK=block)
    return out.view(*x.shape[:-1], n)
