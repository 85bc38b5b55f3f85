"""Chapter 31: the batched LoRA delta as two Triton kernels, in the spirit of Punica's BGMV and SGLang's LoRA
backends: "shrink" (each token's x times its adapter's A: r numbers per adapted part) and "expand" (those numbers
times the adapter's B, added into the layer's output). Every program reads its token's slot index and gathers that
adapter's rows, so a batch mixing any adapters (and tokens without one, slot -1) runs in two launches, with no sort
and no host sync, which also keeps them capturable in a CUDA graph.

A merged layer's parts go through the same two launches: A holds every part's rows one after another
([slots, parts x rank, in]: q's, then k's, then v's), B the whole layer's output columns ([slots, out, rank]), and
a column map says which part (which rank rows of the shrunk numbers) each output column reads, -1 for a column no
part adapts. q, k and v together cost two launches instead of six, and the expand adds into the base multiply's
output in place instead of writing a delta that another kernel adds.

Products are summed in float32 from the loaded values (no tl.dot: no TF32 rounding), the shrunk numbers stay
float32 between the kernels, and each output is rounded once, after the base value and the delta are added.
minisgl/lora/delta.py's torch version is the reference they are tested against.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _shrink_kernel(X, A, Slots, V, stride_x, in_features, rows, splits, BLOCK_R: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    # Program (t, j, s): V[t, s, j*BLOCK_R : (j+1)*BLOCK_R] = A[slot][those rows, s's BLOCK_K inputs] @ X[t][those
    # inputs], in float32 (zeros for slot -1, whose A is never read). One tile per program: a decode step has few
    # tokens, and a loop over the inputs inside one program would wait on each load in turn.
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    s = tl.program_id(2)
    slot = tl.load(Slots + t).to(tl.int64)
    used = slot >= 0
    slot = tl.maximum(slot, 0)
    r = j * BLOCK_R + tl.arange(0, BLOCK_R)
    k = s * BLOCK_K + tl.arange(0, BLOCK_K)
    kmask = (k < in_features) & used
    x = tl.load(X + t * stride_x + k, mask=kmask, other=0.0).to(tl.float32)
    a = tl.load(A + slot * rows * in_features + r[:, None] * in_features + k[None, :],
                mask=(r[:, None] < rows) & kmask[None, :], other=0.0).to(tl.float32)
    tl.store(V + (t * splits + s) * rows + r, tl.sum(a * x[None, :], axis=1), mask=r < rows)


@triton.jit
def _expand_add_kernel(V, B, ColPart, Slots, Scaling, Y, stride_y, out_features, rows, SPLITS: tl.constexpr,
                       RANK: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    # Program (t, j): for the columns n of block j, Y[t, n] += scaling[slot] * B[slot, n] @ V[t, part(n) rows]
    # (V's partial sums over the input splits added first, in a fixed order); columns of no part and tokens of
    # slot -1 are not touched.
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    slot = tl.load(Slots + t).to(tl.int64)
    used = slot >= 0
    slot = tl.maximum(slot, 0)
    n = j * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < out_features
    part = tl.load(ColPart + n, mask=nmask, other=-1).to(tl.int64)
    live = nmask & (part >= 0) & used
    r = tl.arange(0, BLOCK_R)
    mask = live[:, None] & (r[None, :] < RANK)
    v = tl.zeros((BLOCK_N, BLOCK_R), dtype=tl.float32)
    for s in tl.static_range(SPLITS):
        v += tl.load(V + (t * SPLITS + s) * rows + part[:, None] * RANK + r[None, :], mask=mask, other=0.0)
    b = tl.load(B + slot * out_features * RANK + n[:, None] * RANK + r[None, :], mask=mask, other=0.0)
    delta = tl.sum(b.to(tl.float32) * v, axis=1) * tl.load(Scaling + slot)
    y = tl.load(Y + t * stride_y + n, mask=live, other=0.0).to(tl.float32)
    tl.store(Y + t * stride_y + n, (y + delta).to(Y.dtype.element_ty), mask=live)


BLOCK_K = 256  # the inputs one shrink program reads: 1024 inputs (Qwen3-0.6B's hidden size) are 4 programs a token


def lora_add_triton(y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, col_part: torch.Tensor,
                    scaling: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """y [T, out] plus every token's delta, in place (and returned): x [T, in]; a [S, parts x R, in], part p's A
    in rows [p R, (p+1) R); b [S, out, R]; col_part [out] int32, the part of each output column (-1: none);
    scaling [S] float32; slots [T] int (-1: no adapter). a and b contiguous."""
    tokens, in_features = x.shape
    rows, out_features, rank = a.shape[1], b.shape[1], b.shape[2]
    if tokens == 0:
        return y
    if x.stride(1) != 1:
        x = x.contiguous()
    target = y if y.stride(1) == 1 else y.contiguous()
    splits = triton.cdiv(in_features, BLOCK_K)
    shrunk = torch.empty(tokens, splits, rows, dtype=torch.float32, device=x.device)
    block_r = 16
    _shrink_kernel[(tokens, triton.cdiv(rows, block_r), splits)](x, a, slots, shrunk, x.stride(0), in_features,
                                                                 rows, splits, BLOCK_R=block_r, BLOCK_K=BLOCK_K)
    block_n = 64
    _expand_add_kernel[(tokens, triton.cdiv(out_features, block_n))](
        shrunk, b, col_part, slots, scaling, target, target.stride(0), out_features, rows, SPLITS=splits, RANK=rank,
        BLOCK_R=max(triton.next_power_of_2(rank), 16), BLOCK_N=block_n)
    if target is not y:
        y.copy_(target)
    return y


def lora_delta_triton(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: torch.Tensor,
                      slots: torch.Tensor) -> torch.Tensor:
    """As lora_delta_torch, one adapted projection: x [T, in], a [S, R, in], b [S, out, R] (both contiguous),
    scaling [S] float32, slots [T] int (-1: no adapter) -> [T, out] in x's dtype."""
    out = torch.zeros(x.shape[0], b.shape[1], dtype=x.dtype, device=x.device)
    col_part = torch.zeros(b.shape[1], dtype=torch.int32, device=x.device)
    return lora_add_triton(out, x, a, b, col_part, scaling, slots)
