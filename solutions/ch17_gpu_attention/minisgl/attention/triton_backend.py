"""TritonAttnBackend: paged extend and decode attention with the course's own Triton kernels."""

from __future__ import annotations

import torch

from minisgl.attention.base import BaseAttnBackend
from minisgl.core import Batch
from minisgl.kernel.triton.attention import paged_decode_attention, paged_extend_attention


class TritonAttnBackend(BaseAttnBackend):
    """The constructor and the metadata are chapter 5's (BaseAttnBackend); only the attention differs."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        k_cache, v_cache = self.kv_cache.k_cache(layer_id), self.kv_cache.v_cache(layer_id)
        meta = batch.attn_metadata
        scale = self.softmax_scale(q)
        q = q.to(k_cache.dtype)
        if batch.is_decode:
            return paged_decode_attention(q, k_cache, v_cache, self.page_table, meta.table_idx, meta.seq_lens, scale)
        return paged_extend_attention(q, k_cache, v_cache, self.page_table, meta.table_idx, meta.seq_lens,
                                      meta.cached_lens, meta.cu_seqlens_q, meta.max_seqlen_q, scale)
