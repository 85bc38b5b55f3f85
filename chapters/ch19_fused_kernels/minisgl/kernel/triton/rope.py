"""Qwen3's q/k RMSNorm and the rotary embedding as one Triton kernel, in place on q and k.

In torch (chapter 2) this part of a layer is a long chain: a gather of cos and of sin by position, two casts,
for q and for k an RMSNorm, then x * cos, a negation, a cat (rotate_half), a multiply by sin and an add:
about eighteen launches per layer, each reading and writing whole [tokens, heads, head_dim] tensors. Here one
program takes one head of one token, loads it once, normalises it, rotates it and writes it back where it was
(q and k are views of the fused QKV output, so nothing is copied out first).

Every rounding of the torch chain is kept, as chapter 19's RMSNorm kernels keep HF's: the normalised head is
rounded to the model dtype before and after the weight, cos and sin are rounded to it, and so are both
products and their sum. What may still differ is the order of the float32 sum of squares and, where the
compiler fuses a multiply with an add (FMA), one rounding: at most one step of the dtype on any output.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _norm_rope_heads(x_ptr, stride_h, n_heads, w_ptr, cos, sin, eps, NORM: tl.constexpr, HALF: tl.constexpr,
                     BLOCK_H: tl.constexpr):
    """Normalise and rotate the n_heads heads of one token at x_ptr (heads stride_h apart), in place, as one
    [BLOCK_H, HALF] tile per half. A head is [x1 | x2], two halves of HALF numbers ("rotate half" layout)."""
    dtype = x_ptr.dtype.element_ty
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, HALF)
    ptr = x_ptr + h[:, None] * stride_h + d[None, :]
    keep = (h < n_heads)[:, None]
    x1 = tl.load(ptr, mask=keep, other=0.0).to(tl.float32)
    x2 = tl.load(ptr + HALF, mask=keep, other=0.0).to(tl.float32)
    if NORM:  # RMSNorm of each head (a row of the tile) over its 2 * HALF numbers
        variance = (tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / (2 * HALF)
        r = tl.rsqrt(variance + eps)[:, None]
        w1 = tl.load(w_ptr + d).to(tl.float32)[None, :]
        w2 = tl.load(w_ptr + HALF + d).to(tl.float32)[None, :]
        x1 = ((x1 * r).to(dtype).to(tl.float32) * w1).to(dtype).to(tl.float32)
        x2 = ((x2 * r).to(dtype).to(tl.float32) * w2).to(dtype).to(tl.float32)
    # x * cos + rotate_half(x) * sin, with rotate_half(x) = [-x2 | x1]; each product rounded, then the sum
    out1 = (x1 * cos).to(dtype).to(tl.float32) + (-x2 * sin).to(dtype).to(tl.float32)
    out2 = (x2 * cos).to(dtype).to(tl.float32) + (x1 * sin).to(dtype).to(tl.float32)
    tl.store(ptr, out1.to(dtype), mask=keep)
    tl.store(ptr + HALF, out2.to(dtype), mask=keep)


@triton.jit
def _qk_norm_rope_kernel(Q, K, Positions, Cos, Sin, QW, KW, q_heads, k_heads, stride_qt, stride_qh, stride_kt,
                         stride_kh, stride_pos, stride_cos, eps, NORM: tl.constexpr, HALF: tl.constexpr,
                         BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr):
    # One program per token: all its q heads, then all its k heads, with the token's cos and sin loaded once.
    # (One program per head of each token was 24 tiny programs per token: a prefill batch of 16,384 tokens
    # launched 393,216 of them per layer, and the kernel took as long as the whole attention.)
    t = tl.program_id(0).to(tl.int64)
    dtype = Q.dtype.element_ty
    d = tl.arange(0, HALF)
    pos = tl.load(Positions + t * stride_pos).to(tl.int64)  # a decode batch's positions may be a strided view
    cos = tl.load(Cos + pos * stride_cos + d).to(dtype).to(tl.float32)[None, :]  # the tables repeat their first
    sin = tl.load(Sin + pos * stride_cos + d).to(dtype).to(tl.float32)[None, :]  # half: HALF columns do
    _norm_rope_heads(Q + t * stride_qt, stride_qh, q_heads, QW, cos, sin, eps, NORM, HALF, BLOCK_HQ)
    _norm_rope_heads(K + t * stride_kt, stride_kh, k_heads, KW, cos, sin, eps, NORM, HALF, BLOCK_HK)


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 q_weight: torch.Tensor | None = None, k_weight: torch.Tensor | None = None,
                 eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """In place: q [T, Hq, D] and k [T, Hk, D] (unit stride along D; views of the QKV output are fine) become
    rope(rms_norm(x) * weight) (no norm without weights: Llama), rotated by their token's position.

    cos, sin: [max_position, D] float32 tables, both halves equal; positions [T]. Returns (q, k) themselves."""
    if q.dtype != k.dtype or q.stride(2) != 1 or k.stride(2) != 1:
        raise ValueError("q and k need the same dtype and unit stride along head_dim")
    tokens, q_heads, head_dim = q.shape
    if k.shape[0] != tokens or k.shape[2] != head_dim or positions.shape != (tokens,):
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} and positions {tuple(positions.shape)} disagree")
    if head_dim % 2 or (head_dim // 2) & (head_dim // 2 - 1):
        raise ValueError(f"head_dim must be twice a power of two, got {head_dim}")
    if (q_weight is None) != (k_weight is None):
        raise ValueError("give both norm weights (Qwen3) or neither (Llama)")
    if tokens == 0:
        return q, k
    norm = q_weight is not None
    qw = q_weight.contiguous() if norm else q
    kw = k_weight.contiguous() if norm else k
    k_heads = k.shape[1]
    _qk_norm_rope_kernel[(tokens,)](q, k, positions, cos, sin, qw, kw, q_heads, k_heads, q.stride(0), q.stride(1),
                                    k.stride(0), k.stride(1), positions.stride(0), cos.stride(0), eps, NORM=norm,
                                    HALF=head_dim // 2, BLOCK_HQ=triton.next_power_of_2(q_heads),
                                    BLOCK_HK=triton.next_power_of_2(k_heads), num_warps=4)
    return q, k
