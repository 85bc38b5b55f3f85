"""FlashAttnBackend: flash-attn 2's paged kernels (bf16/fp16 on CUDA, pages of a multiple of 256 slots).

flash-attn reads the cache as [pages, page_size, kv_heads, head_dim] through a block table of page ids per
request, which is our page table sampled at every page's first position, divided by the page size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.attention.base import BaseAttnBackend, BaseAttnMetadata
from minisgl.core import Batch
from minisgl.kvcache.base import BaseKVCache

FA_PAGE_MULTIPLE = 256  # flash-attn 2: "Paged KV cache block size must be divisible by 256"


@dataclass
class FlashAttnMetadata(BaseAttnMetadata):
    block_table: torch.Tensor | None = None  # [B, pages]: page ids of each request, in order
    no_prefix: bool = False  # no request has cached tokens: attend over the new k and v directly


class FlashAttnBackend(BaseAttnBackend):
    def __init__(self, kv_cache: BaseKVCache, page_table: torch.Tensor, page_size: int,
                 scale: float | None = None) -> None:
        if page_size % FA_PAGE_MULTIPLE:
            raise ValueError(f"the flash-attn backend needs a page size divisible by {FA_PAGE_MULTIPLE}, "
                             f"got {page_size}")
        import flash_attn  # noqa: F401  (fail here, with the import error, rather than in the first batch)

        super().__init__(kv_cache, page_table, scale)
        self.page_size = page_size

    def prepare_metadata(self, batch: Batch) -> None:
        super().prepare_metadata(batch)
        meta = batch.attn_metadata
        pages = -(-meta.max_seqlen_k // self.page_size)
        first_slots = self.page_table[meta.table_idx, : pages * self.page_size : self.page_size]
        no_prefix = not batch.is_decode and not any(r.cached_len for r in batch.reqs)
        batch.attn_metadata = FlashAttnMetadata(**vars(meta), block_table=(first_slots // self.page_size).int(),
                                                no_prefix=no_prefix)

    def _paged(self, cache: torch.Tensor) -> torch.Tensor:
        return cache.view(-1, self.page_size, *cache.shape[1:])

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        k_cache = self._paged(self.kv_cache.k_cache(layer_id))
        v_cache = self._paged(self.kv_cache.v_cache(layer_id))
        meta = batch.attn_metadata
        scale = self.softmax_scale(q)
        q = q.to(k_cache.dtype)
        if batch.is_decode:
            out = flash_attn_with_kvcache(q.unsqueeze(1), k_cache, v_cache, cache_seqlens=meta.seq_lens,
                                          block_table=meta.block_table, softmax_scale=scale, causal=True)
            return out.squeeze(1)
        if meta.no_prefix:  # the keys are exactly the new tokens: the contiguous kernel, faster than the paged one
            return flash_attn_varlen_func(q, k.to(q.dtype), v.to(q.dtype), meta.cu_seqlens_q, meta.cu_seqlens_q,
                                          meta.max_seqlen_q, meta.max_seqlen_q, softmax_scale=scale, causal=True)
        # causal with more keys than queries aligns the queries with the last keys: the cached prefix
        return flash_attn_varlen_func(q, k_cache, v_cache, meta.cu_seqlens_q, meta.cu_seqlens_k, meta.max_seqlen_q,
                                      meta.max_seqlen_k, softmax_scale=scale, causal=True,
                                      block_table=meta.block_table)
