"""The math of the model's pointwise layers, in plain PyTorch.

These follow Hugging Face's reference implementations operation by operation (same dtype casts,
same order), so that the engine's logits match HF's to float rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight, with the statistics computed in float32."""
    # TODO(ch02): normalise over the last dimension in float32, cast back to x.dtype, then scale by weight.
    raise NotImplementedError("TODO(ch02): rms_norm")


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Add the residual, then normalise: returns (rms_norm(x + residual), x + residual)."""
    # TODO(ch02): one residual add feeding one norm; return both the normalised and the summed tensor.
    raise NotImplementedError("TODO(ch02): fused_add_rms_norm")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_emb(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate every head of x ([tokens, heads, head_dim]) by its token's angle ("rotate half" layout).

    cos and sin are [tokens, head_dim] in float32; the result has x's dtype.
    """
    # TODO(ch02): x * cos + rotate_half(x) * sin, broadcasting over the heads axis, in x's dtype.
    raise NotImplementedError("TODO(ch02): apply_rotary_emb")


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU's gate: x is [gate | up] on the last dimension; returns silu(gate) * up."""
    # TODO(ch02): split the last dimension in two halves (gate first) and combine them.
    raise NotImplementedError("TODO(ch02): silu_and_mul")
