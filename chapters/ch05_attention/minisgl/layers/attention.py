"""The attention layer hands its q, k, v to the engine's attention backend, which owns the KV cache."""

from __future__ import annotations

import torch

from minisgl.core import get_global_ctx
from minisgl.layers.base import StateLessOP


class AttentionLayer(StateLessOP):
    def __init__(self, num_qo_heads: int, num_kv_heads: int, head_dim: int, layer_id: int) -> None:
        self.num_qo_heads = num_qo_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.layer_id = layer_id

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        ctx = get_global_ctx()
        return ctx.attn_backend.forward(q, k, v, self.layer_id, ctx.batch)
