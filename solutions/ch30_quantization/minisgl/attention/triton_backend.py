"""TritonAttnBackend: paged extend and decode attention with the course's own Triton kernels.

Chapter 30: with an FP8 pool the kernels load the FP8 keys and values and convert them to the queries' dtype; the
layer's scales are constants of the whole layer, so they come out of the sums: q.(s_k k) = s_k (q.k) joins the
softmax scale, and sum p (s_v v) = s_v (sum p v) multiplies the output.

Chapter 26: a verify batch whose rows all compute the same number of tokens (what every replayed verify graph runs)
goes to the decode kernel, each row's queries in one tile and its keys split over programs as a small decode
batch's are; the extend kernel would give a row's queries one program per head, a handful of programs for the
whole GPU at batch 1."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from minisgl.attention.base import BaseAttnBackend, BaseAttnMetadata
from minisgl.core import Batch
from minisgl.kernel.triton import attention as triton_attention
from minisgl.kernel.triton.attention import longest_first, paged_decode_attention, paged_extend_attention


@dataclass
class DecodeMetadata(BaseAttnMetadata):
    """A decode batch's metadata for the Triton decode kernel: also the order in which its requests' programs
    start, longest context first (None while triton_attention.LONGEST_FIRST is off; set it before the engine is
    built). The static copy CUDA graphs capture with has every request at the same length, so its order is the
    identity and each of its prefixes (the metadata of a smaller captured batch) a valid order too."""

    order: torch.Tensor | None = None


def add_decode_order(batch: Batch, device: torch.device) -> None:
    """Replace a decode batch's metadata with a DecodeMetadata carrying its longest-first order."""
    order = None
    if triton_attention.LONGEST_FIRST:
        lens = np.fromiter((r.device_len for r in batch.reqs), np.int32, batch.size)
        order = torch.from_numpy(longest_first(lens)).to(device, non_blocking=True)
    batch.attn_metadata = DecodeMetadata(**vars(batch.attn_metadata), order=order)


@dataclass
class VerifyMetadata(BaseAttnMetadata):
    """Chapter 26: a verify batch's metadata, with the number of tokens each of its rows computes when that is the
    same for every row (0 when it is not)."""

    width: int = 0


def add_verify_width(batch: Batch) -> int:
    """Replace a verify batch's metadata with a VerifyMetadata; returns its width."""
    widths = {r.extend_len for r in batch.reqs}
    width = widths.pop() if len(widths) == 1 else 0
    batch.attn_metadata = VerifyMetadata(**vars(batch.attn_metadata), width=width)
    return width


def verify_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
                     meta: VerifyMetadata, scale: float) -> torch.Tensor:
    """Chapter 26: a verify batch of rows `meta.width` tokens wide, by the decode kernel."""
    return paged_decode_attention(q, k_cache, v_cache, page_table, meta.table_idx, meta.seq_lens, scale,
                                  width=meta.width)


class TritonAttnBackend(BaseAttnBackend):
    """The constructor and the metadata are chapter 5's (BaseAttnBackend); only the attention differs."""

    def prepare_metadata(self, batch: Batch) -> None:
        super().prepare_metadata(batch)
        if batch.is_decode:
            add_decode_order(batch, self.page_table.device)
        elif batch.is_verify:
            add_verify_width(batch)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        k_cache, v_cache = self.kv_cache.k_cache(layer_id), self.kv_cache.v_cache(layer_id)
        meta = batch.attn_metadata
        scale = self.softmax_scale(q)
        fp8 = getattr(self.kv_cache, "is_fp8", False)
        if fp8:
            scale *= self.kv_cache.k_scales[layer_id]
        else:
            q = q.to(k_cache.dtype)
        if batch.is_decode:
            out = paged_decode_attention(q, k_cache, v_cache, self.page_table, meta.table_idx, meta.seq_lens, scale,
                                         order=meta.order)
        elif batch.is_verify and meta.width:
            out = verify_attention(q, k_cache, v_cache, self.page_table, meta, scale)
        else:
            out = paged_extend_attention(q, k_cache, v_cache, self.page_table, meta.table_idx, meta.seq_lens,
                                         meta.cached_lens, meta.cu_seqlens_q, meta.max_seqlen_q, scale)
        return out * self.kv_cache.v_scales[layer_id] if fp8 else out
