"""TorchAttnBackend: paged attention in plain PyTorch. Slow, simple, and the reference for faster backends."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.attention.base import BaseAttnBackend, BaseAttnMetadata
from minisgl.core import Batch


def _gather_kv(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The cache rows of `slots` (any shape, int32 or int64): [*slots.shape, H, D]. One index_select over the
    flattened slots copies whole rows, several times faster on a CPU than indexing with `cache[slots]`.
    Grouped-query heads are not repeated here: SDPA's enable_gqa lets each group of query heads read its kv head."""
    return cache.index_select(0, slots.reshape(-1)).view(*slots.shape, *cache.shape[1:])


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """SDPA with heads first ([batch, heads, len, D]) and grouped-query heads read in place (enable_gqa). On a CPU,
    16-bit inputs are attended in float32 (the CPU's 16-bit SDPA kernels are several times slower) and the result
    is cast back."""
    if q.device.type == "cpu" and q.dtype != torch.float32:
        return _attend(q.float(), k.float(), v.float(), mask, scale).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


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
        outputs = []
        for i in range(len(meta.seq_lens)):
            # TODO(ch05): read this request's keys/values through its page-table row (all seq_len tokens, with
            # _gather_kv), and let new token j (at position cached_len + j) see keys at positions <= cached_len + j
            # (attend with _attend: the kv heads are not repeated).
            raise NotImplementedError("TODO(ch05): TorchAttnBackend.forward_extend")
        return torch.cat(outputs)

    def forward_decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       meta: BaseAttnMetadata, scale: float) -> torch.Tensor:
        """Decode: one query per request against all its keys, padded to the longest request and masked."""
        # TODO(ch05): gather [B, max_len] slots from the page-table rows (keys and values with _gather_kv), mask
        # positions >= seq_len, and attend with one query per request (q is [B, Hq, D]; _attend).
        raise NotImplementedError("TODO(ch05): TorchAttnBackend.forward_decode")
