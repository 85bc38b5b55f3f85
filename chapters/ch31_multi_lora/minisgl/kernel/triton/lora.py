"""Chapter 31: the batched LoRA delta as two Triton kernels, in the spirit of Punica's BGMV and SGLang's LoRA
backends: "shrink" (each token's x times its adapter's A: r numbers) and "expand" (those r numbers times the
adapter's B: the output columns). Every program reads its token's slot index and gathers that adapter's rows, so a
batch mixing any adapters (and tokens without one, slot -1) runs in two launches, with no sort and no host sync,
which also keeps them capturable in a CUDA graph.

Products are summed in float32 from the loaded values (no tl.dot: no TF32 rounding), the r intermediate numbers stay
float32 between the kernels, and the result is rounded once to x's dtype. minisgl/lora/delta.py's torch version
is the reference they are tested against.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _shrink_kernel(X, A, Slots, V, stride_x, in_features, RANK: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    # One program per token: V[t, :RANK] = A[slot] @ X[t] in float32 (zeros for slot -1).
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(Slots + t).to(tl.int64)
    used = slot >= 0
    slot = tl.maximum(slot, 0)
    r = tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_R,), dtype=tl.float32)
    a_base = A + slot * RANK * in_features
    for k0 in range(0, in_features, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        kmask = k < in_features
        x = tl.load(X + t * stride_x + k, mask=kmask & used, other=0.0).to(tl.float32)
        a = tl.load(a_base + r[:, None] * in_features + k[None, :], mask=(r[:, None] < RANK) & kmask[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.sum(a * x[None, :], axis=1)
    tl.store(V + t * BLOCK_R + r, acc)


@triton.jit
def _expand_kernel(V, B, Slots, Scaling, Out, out_features, RANK: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    # Program (t, j): Out[t, j*BLOCK_N : (j+1)*BLOCK_N] = scaling[slot] * B[slot][those rows] @ V[t].
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    slot = tl.load(Slots + t).to(tl.int64)
    used = slot >= 0
    slot = tl.maximum(slot, 0)
    n = j * BLOCK_N + tl.arange(0, BLOCK_N)
    r = tl.arange(0, BLOCK_R)
    nmask = n < out_features
    v = tl.load(V + t * BLOCK_R + r)
    b = tl.load(B + slot * out_features * RANK + n[:, None] * RANK + r[None, :],
                mask=nmask[:, None] & (r[None, :] < RANK), other=0.0).to(tl.float32)
    scale = tl.where(used, tl.load(Scaling + slot), 0.0)
    out = tl.sum(b * v[None, :], axis=1) * scale
    tl.store(Out + t * out_features + n, out.to(Out.dtype.element_ty), mask=nmask)


def lora_delta_triton(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: torch.Tensor,
                      slots: torch.Tensor) -> torch.Tensor:
    """As lora_delta_torch: x [T, in], a [S, R, in], b [S, out, R] (both contiguous), scaling [S] float32,
    slots [T] int (-1: no adapter) -> [T, out] in x's dtype."""
    tokens, in_features = x.shape
    rank, out_features = a.shape[1], b.shape[1]
    if x.stride(1) != 1:
        x = x.contiguous()
    block_r = max(triton.next_power_of_2(rank), 16)
    shrunk = torch.empty(tokens, block_r, dtype=torch.float32, device=x.device)
    out = torch.empty(tokens, out_features, dtype=x.dtype, device=x.device)
    if tokens == 0:
        return out
    _shrink_kernel[(tokens,)](x, a, slots, shrunk, x.stride(0), in_features, RANK=rank, BLOCK_R=block_r,
                              BLOCK_K=128)
    block_n = 64
    _expand_kernel[(tokens, triton.cdiv(out_features, block_n))](shrunk, b, slots, scaling, out, out_features,
                                                                 RANK=rank, BLOCK_R=block_r, BLOCK_N=block_n)
    return out
