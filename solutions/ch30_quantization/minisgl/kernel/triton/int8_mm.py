"""Chapter 30: weight-only INT8 on a GPU as one Triton kernel. x [M, K] in bfloat16 (or float32) times int8 codes
q [N, K], scaled per output column: y = (x q^T) * s. The codes are loaded as int8 (a quarter of float32's bytes, half
of bfloat16's), widened to x's dtype in registers (exact: |q| <= 127) and multiplied with tl.dot, summing in float32;
the scale multiplies each output once, after the sum. No dequantized copy of the weight is ever written.

A decode step has a few rows and the weight is all the memory traffic, so the work is split over the weight: one
program per block of output columns, and, where those blocks are too few to occupy the GPU, over blocks of the
inputs too (split-K): each split writes its partial sums to a float32 buffer of its own, and a second small kernel
adds the splits in a fixed order, scales and casts, so the result does not depend on which program finished first.
With one split the scale and the cast happen in the same kernel: one launch per linear layer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _int8_mm_kernel(X, Q, S, Out, M, N, K, stride_xm, k_per_split, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, IEEE: tl.constexpr, SPLIT: tl.constexpr):
    # Program (m, n, s): x[rows m, inputs of split s] @ q[columns n, same inputs]^T. With one split, scaled and
    # stored as the output (x's dtype); with several, stored as float32 partial sums Out[s] for _reduce_kernel.
    pid_m, pid_n, pid_s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_start = pid_s * k_per_split
    for k0 in range(k_start, k_start + k_per_split, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        kmask = rk < K
        x = tl.load(X + rm[:, None] * stride_xm + rk[None, :], mask=(rm[:, None] < M) & kmask[None, :], other=0.0)
        q = tl.load(Q + rn[None, :].to(tl.int64) * K + rk[:, None], mask=(rn[None, :] < N) & kmask[:, None],
                    other=0)
        if IEEE:
            acc += tl.dot(x, q.to(x.dtype), input_precision="ieee")
        else:
            acc += tl.dot(x, q.to(x.dtype))
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT:
        tl.store(Out + pid_s * M * N + rm[:, None] * N + rn[None, :], acc, mask=mask)
    else:
        scale = tl.load(S + rn, mask=rn < N, other=0.0).to(tl.float32)
        y = acc * scale[None, :]
        tl.store(Out + rm[:, None] * N + rn[None, :], y.to(Out.dtype.element_ty), mask=mask)


@triton.jit
def _reduce_kernel(Part, S, Out, M, N, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    # Out[i] = (sum over the splits of Part[s, i], in split order) * scale of i's column, in Out's dtype.
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLITS):
        acc += tl.load(Part + s * M * N + i, mask=mask, other=0.0)
    scale = tl.load(S + i % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + i, (acc * scale).to(Out.dtype.element_ty), mask=mask)


def _blocks(rows: int, out_features: int, in_features: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, splits): narrow column blocks, and split-K until there are ~128 programs."""
    block_m = 16 if rows <= 16 else 32 if rows <= 32 else 64
    block_n = 32 if out_features <= 4096 else 64
    block_k = 128
    programs = triton.cdiv(rows, block_m) * triton.cdiv(out_features, block_n)
    splits = 1
    while programs * splits * 2 <= 128 and in_features // (splits * 2) >= 2 * block_k:
        splits *= 2
    return block_m, block_n, block_k, splits


def int8_mm_triton(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M, K] (bfloat16, float16 or float32) @ (qweight int8 [N, K] * scale [N])^T -> [M, N] in x's dtype."""
    rows, in_features = x.shape
    out_features = qweight.shape[0]
    if x.stride(1) != 1:
        x = x.contiguous()
    block_m, block_n, block_k, splits = _blocks(rows, out_features, in_features)
    k_per_split = triton.cdiv(triton.cdiv(in_features, splits), block_k) * block_k
    out = torch.empty(rows, out_features, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(out_features, block_n), splits)
    partial = torch.empty(splits, rows, out_features, dtype=torch.float32, device=x.device) if splits > 1 else out
    _int8_mm_kernel[grid](x, qweight, scale, partial, rows, out_features, in_features, x.stride(0), k_per_split,
                          BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, IEEE=x.dtype == torch.float32,
                          SPLIT=splits > 1)
    if splits > 1:
        block = 1024
        _reduce_kernel[(triton.cdiv(rows * out_features, block),)](partial, scale, out, rows, out_features,
                                                                   SPLITS=splits, BLOCK=block)
    return out
