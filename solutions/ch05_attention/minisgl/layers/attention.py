"""The attention layer hands its q, k, v to the engine's attention backend, which owns the KV cache.

Without a backend (a model used on its own, as in chapter 3) it falls back to attention within the
batch, recomputed from scratch: same results, no cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.core import Batch, get_global_ctx
from minisgl.layers.base import StateLessOP


def attention_without_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Causal attention of each request over its own new tokens only (every request starts at position 0)."""
    if any(r.cached_len for r in batch.reqs):
        raise ValueError("attention without a KV cache needs every request to start from cached_len 0")
    group = q.shape[1] // k.shape[1]
    outputs, start = [], 0
    for req in batch.reqs:
        end = start + req.extend_len
        qi, ki, vi = (t[start:end].transpose(0, 1) for t in (q, k, v))
        out = F.scaled_dot_product_attention(qi, ki.repeat_interleave(group, 0), vi.repeat_interleave(group, 0),
                                             is_causal=True)
        outputs.append(out.transpose(0, 1))
        start = end
    return torch.cat(outputs)


class AttentionLayer(StateLessOP):
    def __init__(self, num_qo_heads: int, num_kv_heads: int, head_dim: int, layer_id: int) -> None:
        self.num_qo_heads = num_qo_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.layer_id = layer_id

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        ctx = get_global_ctx()
        if ctx.attn_backend is None:
            return attention_without_cache(q, k, v, ctx.batch)
        return ctx.attn_backend.forward(q, k, v, self.layer_id, ctx.batch)
