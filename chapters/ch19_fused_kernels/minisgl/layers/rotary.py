"""Rotary position embedding (RoPE), including Llama 3's frequency scaling. Chapter 19 hands its tables to the
fused q/k norm + RoPE kernel (`tables`)."""

from __future__ import annotations

import math

import torch

from minisgl.kernel.torch_ops import apply_rotary_emb
from minisgl.layers.base import StateLessOP


def default_inv_freq(rotary_dim: int, base: float) -> torch.Tensor:
    """theta_i = base^(-2i/d) for i < d/2, computed like HF (int64 arange, then float32)."""
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim
    return 1.0 / (base**exponents)


def llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    """Llama 3 scaling: slow down low frequencies by `factor`, keep high ones, blend in between."""
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(StateLessOP):
    """Precomputes cos/sin for every position once; forward rotates q and k by their token positions."""

    def __init__(self, head_dim: int, max_position: int, base: float, scaling: dict | None = None) -> None:
        self.head_dim = head_dim
        inv_freq = default_inv_freq(head_dim, base)
        rope_type = (scaling or {}).get("rope_type", "default")
        if rope_type == "llama3":
            inv_freq = llama3_inv_freq(inv_freq, scaling)
        elif rope_type != "default":
            raise ValueError(f"unsupported rope scaling type {rope_type!r} (supported: default, llama3)")
        freqs = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
        angles = torch.cat([freqs, freqs], dim=-1)  # "rotate half" layout: both halves share angles
        self._cos = angles.cos()
        self._sin = angles.sin()

    def tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The cos and sin tables [max_position, head_dim] (float32), moved to `device` on first use."""
        if self._cos.device != device:
            self._cos, self._sin = self._cos.to(device), self._sin.to(device)
        return self._cos, self._sin

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q: [tokens, q_heads, head_dim], k: [tokens, kv_heads, head_dim]."""
        cos, sin = self.tables(positions.device)
        cos, sin = cos[positions], sin[positions]
        return apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
