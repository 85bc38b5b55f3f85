"""Attention over the current batch, recomputed from scratch every step (no KV cache yet).

Chapter 4 adds the KV cache and chapter 5 replaces this file: attention then reads earlier tokens'
keys and values from the cache instead of recomputing them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.core import get_global_ctx
from minisgl.layers.base import StateLessOP


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q: [n, Hq, D], k/v: [n, Hkv, D] of one sequence -> [n, Hq, D]; token i sees tokens 0..i."""
    group = q.shape[1] // k.shape[1]  # grouped-query attention: each kv head serves `group` q heads
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                         is_causal=True, scale=scale)
    return out.transpose(0, 1)


class AttentionLayer(StateLessOP):
    def __init__(self, num_qo_heads: int, num_kv_heads: int, head_dim: int, layer_id: int) -> None:
        self.num_qo_heads = num_qo_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.layer_id = layer_id
        self.scale = head_dim**-0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batch = get_global_ctx().batch
        if any(r.cached_len for r in batch.reqs):
            raise ValueError("this attention has no KV cache: every request must start from cached_len 0")
        outputs, start = [], 0
        for req in batch.reqs:
            end = start + req.extend_len
            outputs.append(causal_attention(q[start:end], k[start:end], v[start:end], self.scale))
            start = end
        return torch.cat(outputs)
