"""RMSNorm and residual add + RMSNorm as Triton kernels, one program per row.

The torch versions (kernel/torch_ops.py) run as a chain of small kernels: add, cast up, square, mean, add eps,
rsqrt, multiply, cast down, multiply by the weight, each reading its input from memory and writing its
result back. Here a program loads its row (and the residual's) once, does every step in registers, and
writes the sum and the normalised row once.

The operation order is Hugging Face's, step by step, because the engine is checked token for token against
HF greedy decoding:

    summed = x + residual            in the model dtype (the sum is rounded to bf16 before anything else)
    s = summed.float()
    variance = mean(s * s)           float32
    y = (s * rsqrt(variance + eps)).to(dtype)
    out = weight * y                 in the model dtype

Fusing changes where values live, not what is computed: skipping the rounding of the sum, or multiplying
by the weight before casting down, would be *more* accurate and still wrong here. On random bf16 rows of
1024 numbers, either shortcut changes a fifth to a quarter of the outputs by one or two bf16 steps (a step
is 0.4 to 0.8 %); the next layer then sees different inputs, and sooner or later a near-tie in the logits
flips a greedy token.

What remains different is the order in which the float32 sum of squares is added up (a tree in the kernel,
torch's own order in torch): it moves the variance by a few float32 ulps, which changes a bf16 output only
when the value lies within that distance of a rounding boundary.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_ROW = 65536  # the kernels hold a whole row in one block


@triton.jit
def _rmsnorm_kernel(X, W, Out, heads, stride_outer, stride_inner, n_cols, eps, BLOCK: tl.constexpr):
    # One program per row; BLOCK >= n_cols, so the whole row is in registers. Row r of X starts at
    # (r // heads) * stride_outer + (r % heads) * stride_inner: a [tokens, heads, n] view (Qwen3's q and k heads,
    # sliced out of the fused QKV output) is read in place. Out is contiguous.
    row = tl.program_id(0).to(tl.int64)
    x_row = X + (row // heads) * stride_outer + (row % heads) * stride_inner
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # TODO(ch19): load the row (x_row + cols, masked, 0 beyond n_cols) as float32, variance = sum of squares /
    # n_cols, y = x * rsqrt(variance + eps) rounded to X's dtype, then y * weight (the product of two 16-bit
    # values is exact in float32) rounded to Out's dtype, stored into row `row` of Out (n_cols apart).
    raise NotImplementedError("TODO(ch19): _rmsnorm_kernel")


@triton.jit
def _fused_add_rmsnorm_kernel(X, R, W, Out, Sum, stride_x, stride_r, stride_o, stride_s, n_cols, eps,
                              BLOCK: tl.constexpr):
    # One program per row: the residual add and the norm of its result, reading x and residual once.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # TODO(ch19): summed = x + residual, added in float32 and rounded to Sum's dtype (torch's x + residual in
    # the model dtype); store it into Sum. Then normalise that rounded sum exactly as _rmsnorm_kernel does
    # (float32 statistics, y rounded to Sum's dtype, times the weight) and store it into Out.
    raise NotImplementedError("TODO(ch19): _fused_add_rmsnorm_kernel")


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """[..., n] as [rows, n] with unit stride along a row: a view when possible, a copy otherwise."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(1) == 1 else x2.contiguous()


def _row_layout(x: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """(tensor, heads, stride_outer, stride_inner) for _rmsnorm_kernel: [tokens, heads, n] views with unit stride
    along n are used as they are (reshaping q's heads out of the fused QKV output would copy them)."""
    if x.dim() == 3 and x.stride(2) == 1:
        return x, x.shape[1], x.stride(0), x.stride(1)
    x2 = _as_rows(x)
    return x2, 1, x2.stride(0), 0


def _launch_shape(n_cols: int) -> tuple[int, int]:
    if n_cols > MAX_ROW:
        raise ValueError(f"the Triton RMSNorm holds a row in one block: at most {MAX_ROW} numbers, got {n_cols}")
    block = triton.next_power_of_2(n_cols)
    return block, 8 if block >= 4096 else 4  # (BLOCK, num_warps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Same result and dtype as torch_ops.rms_norm: x [..., n], weight [n]."""
    n_cols = x.shape[-1]
    rows = x.numel() // n_cols if n_cols else 0
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if rows:
        src, heads, stride_outer, stride_inner = _row_layout(x)
        block, warps = _launch_shape(n_cols)
        _rmsnorm_kernel[(rows,)](src, weight.contiguous(), out, heads, stride_outer, stride_inner, n_cols, eps,
                                 BLOCK=block, num_warps=warps)
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Same results and dtypes as torch_ops.fused_add_rms_norm: (rms_norm(x + residual), x + residual)."""
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} differ in shape")
    x2, r2 = _as_rows(x), _as_rows(residual)
    summed = torch.empty(x2.shape, dtype=torch.promote_types(x.dtype, residual.dtype), device=x.device)
    out = torch.empty(x2.shape, dtype=torch.promote_types(summed.dtype, weight.dtype), device=x.device)
    if x2.shape[0]:
        block, warps = _launch_shape(x2.shape[1])
        _fused_add_rmsnorm_kernel[(x2.shape[0],)](x2, r2, weight.contiguous(), out, summed, x2.stride(0),
                                                  r2.stride(0), out.stride(0), summed.stride(0), x2.shape[1], eps,
                                                  BLOCK=block, num_warps=warps)
    return out.view(x.shape), summed.view(x.shape)
