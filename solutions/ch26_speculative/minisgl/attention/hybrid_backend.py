"""HybridAttnBackend: flash-attn for prefill, the course's Triton kernel for decode.

Measured on an H200 (chapter 22), the two libraries are best at different halves of the work. flash-attn's
prefill kernels are hard to beat; its decode kernel on paged KV (`flash_fwd_splitkv_kernel`) reads the cache at
about 80% of the copy bandwidth, while chapter 17's decode kernel, one program per (request, KV head) that
reads each key once for the whole query group, reaches over 90%. A decode step at a large batch is almost
all KV reading, so the decode kernel sets the step's time. Both read the same cache: flash-attn through block
tables of pages, the Triton kernel through the page table's slot per position.

Chapter 26: a verify batch whose rows are all the same width (every replayed verify graph) takes the Triton decode
kernel too, as TritonAttnBackend explains; a ragged one (run eagerly) flash-attn.
"""

from __future__ import annotations

import torch

from minisgl.attention.base import BaseAttnBackend
from minisgl.attention.fa_backend import FlashAttnBackend
from minisgl.attention.triton_backend import add_decode_order, add_verify_width, verify_attention
from minisgl.core import Batch
from minisgl.kernel.triton.attention import paged_decode_attention


class HybridAttnBackend(FlashAttnBackend):
    def prepare_metadata(self, batch: Batch) -> None:
        if batch.is_decode:  # the Triton kernel needs no block table: skip building one every step
            BaseAttnBackend.prepare_metadata(self, batch)
            add_decode_order(batch, self.page_table.device)
            return
        if batch.is_verify:
            BaseAttnBackend.prepare_metadata(self, batch)
            if add_verify_width(batch):
                return
        super().prepare_metadata(batch)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        meta = batch.attn_metadata
        verify = batch.is_verify and getattr(meta, "width", 0)
        if not batch.is_decode and not verify:
            return super().forward(q, k, v, layer_id, batch)
        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        k_cache, v_cache = self.kv_cache.k_cache(layer_id), self.kv_cache.v_cache(layer_id)
        if verify:
            return verify_attention(q.to(k_cache.dtype), k_cache, v_cache, self.page_table, meta, self.softmax_scale(q))
        return paged_decode_attention(q.to(k_cache.dtype), k_cache, v_cache, self.page_table, meta.table_idx,
                                      meta.seq_lens, self.softmax_scale(q), order=meta.order)
