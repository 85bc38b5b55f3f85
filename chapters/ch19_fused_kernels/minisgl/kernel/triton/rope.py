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
def _qk_norm_rope_kernel(Q, K, Positions, Cos, Sin, QW, KW, q_heads, stride_qt, stride_qh, stride_kt, stride_kh,
                         stride_pos, stride_cos, eps, NORM: tl.constexpr, HALF: tl.constexpr):
    # One program per (token, head); heads [0, q_heads) are q's, the rest k's. A head is [x1 | x2], two halves
    # of HALF numbers ("rotate half" layout); the cos/sin tables repeat their first half, so HALF columns do.
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    if h < q_heads:
        x_ptr = Q + t * stride_qt + h * stride_qh
        w_ptr = QW
    else:
        x_ptr = K + t * stride_kt + (h - q_heads) * stride_kh
        w_ptr = KW
    dtype = Q.dtype.element_ty
    d = tl.arange(0, HALF)
    x1 = tl.load(x_ptr + d).to(tl.float32)
    x2 = tl.load(x_ptr + HALF + d).to(tl.float32)
    if NORM:
        variance = (tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / (2 * HALF)
        r = tl.rsqrt(variance + eps)
        w1 = tl.load(w_ptr + d).to(tl.float32)
        w2 = tl.load(w_ptr + HALF + d).to(tl.float32)
        x1 = ((x1 * r).to(dtype).to(tl.float32) * w1).to(dtype).to(tl.float32)
        x2 = ((x2 * r).to(dtype).to(tl.float32) * w2).to(dtype).to(tl.float32)
    pos = tl.load(Positions + t * stride_pos).to(tl.int64)  # a decode batch's positions may be a strided view
    cos = tl.load(Cos + pos * stride_cos + d).to(dtype).to(tl.float32)
    sin = tl.load(Sin + pos * stride_cos + d).to(dtype).to(tl.float32)
    # x * cos + rotate_half(x) * sin, with rotate_half(x) = [-x2 | x1]; each product rounded, then the sum
    out1 = (x1 * cos).to(dtype).to(tl.float32) + (-x2 * sin).to(dtype).to(tl.float32)
    out2 = (x2 * cos).to(dtype).to(tl.float32) + (x1 * sin).to(dtype).to(tl.float32)
    tl.store(x_ptr + d, out1.to(dtype))
    tl.store(x_ptr + HALF + d, out2.to(dtype))


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
    grid = (tokens, q_heads + k.shape[1])
    _qk_norm_rope_kernel[grid](q, k, positions, cos, sin, qw, kw, q_heads, q.stride(0), q.stride(1), k.stride(0),
                               k.stride(1), positions.stride(0), cos.stride(0), eps, NORM=norm, HALF=head_dim // 2,
                               num_warps=1)
    return q, k
