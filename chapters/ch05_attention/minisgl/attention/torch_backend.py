"""TorchAttnBackend: paged attention in plain PyTorch. Slow, simple, and the reference for faster backends."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.attention.base import BaseAttnBackend, BaseAttnMetadata
from minisgl.core import Batch


def _expand_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """Grouped-query attention: repeat each kv head for the `group` query heads that share it."""
    return x.repeat_interleave(group, dim=-2) if group > 1 else x


class TorchAttnBackend(BaseAttnBackend):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        k_cache, v_cache = self.kv_cache.k_cache(layer_id), self.kv_cache.v_cache(layer_id)
        scale = self.softmax_scale(q)
        if batch.is_decode:
            return self.forward_decode(q, k_cache, v_cache, batch.attn_metadata, scale)
        return self.forward_extend(q, k_cache, v_cache, batch.attn_metadata, scale)

    def forward_extend(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       meta: BaseAttnMetadata, scale: float) -> torch.Tensor:
        """Prefill: request i's new tokens attend to its cached prefix and causally to each other."""
        group = q.shape[1] // k_cache.shape[1]
        outputs = []
        for i in range(len(meta.seq_lens)):
            # TODO(ch05): read this request's keys/values through its page-table row (all seq_len tokens), and
            # let new token j (at position cached_len + j) see keys at positions <= cached_len + j.
            raise NotImplementedError("TODO(ch05): TorchAttnBackend.forward_extend")
        return torch.cat(outputs)

    def forward_decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       meta: BaseAttnMetadata, scale: float) -> torch.Tensor:
        """Decode: one query per request against all its keys, padded to the longest request and masked."""
        group = q.shape[1] // k_cache.shape[1]
        # TODO(ch05): gather [B, max_len] slots from the page-table rows, mask positions >= seq_len, and
        # attend with one query per request (q is [B, Hq, D]).
        raise NotImplementedError("TODO(ch05): TorchAttnBackend.forward_decode")
