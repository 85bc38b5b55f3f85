"""TorchAttnBackend: paged attention in plain PyTorch. Slow, simple, and the reference for faster backends.

Chapter 30: the keys and values it gathers go through the pool's dequantize (an FP8 pool's rows cast back and
multiplied by the layer's scale; any other pool's rows as they are)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.attention.base import BaseAttnBackend, BaseAttnMetadata
from minisgl.core import Batch
from minisgl.kernel import cpu_attention


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


# An extend batch whose requests add at most this many tokens each (chapter 26's verify rows add k + 1) runs as
# decode rows through the CPU kernel: a loop of per-request SDPA calls costs more than the attention at this size.
FEW_NEW_TOKENS = 8


class TorchAttnBackend(BaseAttnBackend):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        k_cache, v_cache = self.kv_cache.k_cache(layer_id), self.kv_cache.v_cache(layer_id)
        scale = self.softmax_scale(q)
        if batch.is_decode:
            return self.forward_decode(q, k_cache, v_cache, batch.attn_metadata, scale, layer_id)
        return self.forward_extend(q, k_cache, v_cache, batch.attn_metadata, scale, layer_id)

    def _read(self, rows: torch.Tensor, layer_id: int, which: str, dtype: torch.dtype) -> torch.Tensor:
        """Gathered cache rows in the queries' dtype (chapter 30: an FP8 pool's scaled back)."""
        return rows if rows.dtype == dtype else self.kv_cache.dequantize(rows, layer_id, which, dtype)

    def forward_extend(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       meta: BaseAttnMetadata, scale: float, layer_id: int = 0) -> torch.Tensor:
        """Prefill: request i's new tokens attend to its cached prefix and causally to each other."""
        if meta.max_seqlen_q <= FEW_NEW_TOKENS and cpu_attention.applies(q, k_cache):
            return self.extend_as_decode_rows(q, k_cache, v_cache, meta, scale)
        outputs = []
        for i in range(len(meta.seq_lens)):
            q_i = q[meta.cu_seqlens_q[i] : meta.cu_seqlens_q[i + 1]]  # [n, Hq, D]
            seq_len, cached = int(meta.seq_lens[i]), int(meta.cached_lens[i])
            slots = self.page_table[meta.table_idx[i], :seq_len]
            k_i = self._read(_gather_kv(k_cache, slots), layer_id, "k", q.dtype)  # [seq_len, Hkv, D]
            v_i = self._read(_gather_kv(v_cache, slots), layer_id, "v", q.dtype)
            query_pos = torch.arange(cached, seq_len, device=q.device)
            mask = torch.arange(seq_len, device=q.device)[None, :] <= query_pos[:, None]  # [n, seq_len]
            out = _attend(q_i.transpose(0, 1), k_i.transpose(0, 1), v_i.transpose(0, 1), mask, scale)
            outputs.append(out.transpose(0, 1))
        return torch.cat(outputs)

    def extend_as_decode_rows(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              meta: BaseAttnMetadata, scale: float) -> torch.Tensor:
        """The same causal attention, one decode row per new token: new token j of request i attends to the first
        cached_i + j + 1 slots of its page-table row (its KV is stored already), in one call of the CPU kernel."""
        new = (meta.seq_lens - meta.cached_lens).long()
        request = torch.repeat_interleave(torch.arange(len(new)), new)  # of each new token, in q's row order
        position = torch.arange(len(request)) - meta.cu_seqlens_q[:-1].long()[request]  # among its request's new
        lens = meta.cached_lens.long()[request] + position + 1
        if len(request) != q.shape[0]:
            raise ValueError(f"{q.shape[0]} query rows for {len(request)} new tokens in the metadata")
        return cpu_attention.paged_decode_attention(q, k_cache, v_cache, self.page_table, meta.table_idx[request],
                                                    lens, meta.max_seqlen_k, scale)

    def forward_decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       meta: BaseAttnMetadata, scale: float, layer_id: int = 0) -> torch.Tensor:
        """Decode: one query per request against all its keys, padded to the longest request and masked. On a CPU
        (chapter 22) a C kernel reads each request's keys and values in place instead (kernel/cpu_attention.py)."""
        if cpu_attention.applies(q, k_cache):
            return cpu_attention.paged_decode_attention(q, k_cache, v_cache, self.page_table, meta.table_idx,
                                                        meta.seq_lens, meta.max_seqlen_k, scale)
        max_len = meta.max_seqlen_k
        slots = self.page_table[meta.table_idx, :max_len]  # [B, L]
        k = self._read(_gather_kv(k_cache, slots), layer_id, "k", q.dtype).transpose(1, 2)  # [B, Hkv, L, D]
        v = self._read(_gather_kv(v_cache, slots), layer_id, "v", q.dtype).transpose(1, 2)
        mask = torch.arange(max_len, device=q.device)[None, :] < meta.seq_lens[:, None]  # [B, L]
        out = _attend(q.unsqueeze(2), k, v, mask[:, None, None, :], scale)
        return out.squeeze(2)
