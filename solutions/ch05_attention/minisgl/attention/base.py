"""The interface every attention backend implements (torch now; Triton and flash-attn in chapter 17)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from minisgl.core import Batch

if TYPE_CHECKING:
    from minisgl.kvcache.base import BaseKVCache


@dataclass
class BaseAttnMetadata:
    """Per-batch facts a backend computes once and every layer reuses."""

    cu_seqlens_q: torch.Tensor  # [B+1]: request i's new tokens are rows cu_seqlens_q[i]:cu_seqlens_q[i+1]
    cu_seqlens_k: torch.Tensor  # [B+1]: the same offsets over every token each request attends to
    seq_lens: torch.Tensor  # [B]: tokens each request attends to (cached + new)
    cached_lens: torch.Tensor  # [B]
    table_idx: torch.Tensor  # [B]: page-table row of each request
    max_seqlen_q: int
    max_seqlen_k: int

    def last_indices(self) -> torch.Tensor:
        return self.cu_seqlens_q[1:].long() - 1


def make_metadata(batch: Batch, device: torch.device | str) -> BaseAttnMetadata:
    """Offsets and lengths of the batch: prefix sums of new-token counts (q) and attended lengths (k).

    Built on the CPU, then copied with non_blocking=True: a blocking copy to the GPU waits for everything
    already queued there, which would stall the CPU once per batch (chapter 11 overlaps that time away).
    """
    # TODO(ch05): build cu_seqlens_q from extend lengths and cu_seqlens_k from device lengths (int32, with a
    # leading 0), plus seq_lens (device lengths) and cached_lens, both int32 too, table_idx (int64: it indexes
    # the page table) and the two maxima as Python ints. All built on the CPU, then moved to `device`.
    # >>> solution
    extend = torch.tensor([r.extend_len for r in batch.reqs], dtype=torch.int32)
    seq_lens = torch.tensor([r.device_len for r in batch.reqs], dtype=torch.int32)
    zero = torch.zeros(1, dtype=torch.int32)
    return BaseAttnMetadata(
        cu_seqlens_q=torch.cat([zero, extend.cumsum(0, dtype=torch.int32)]).to(device, non_blocking=True),
        cu_seqlens_k=torch.cat([zero, seq_lens.cumsum(0, dtype=torch.int32)]).to(device, non_blocking=True),
        seq_lens=seq_lens.to(device, non_blocking=True),
        cached_lens=torch.tensor([r.cached_len for r in batch.reqs], dtype=torch.int32).to(device, non_blocking=True),
        table_idx=torch.tensor([r.table_idx for r in batch.reqs], dtype=torch.int64).to(device, non_blocking=True),
        max_seqlen_q=int(extend.max()),
        max_seqlen_k=int(seq_lens.max()),
    )
    # <<< solution


class BaseAttnBackend(ABC):
    """A backend holds references, not data: the KV cache it stores into and reads from, and the page table
    that maps each request's positions to cache slots. `scale` is the softmax scale (None: 1/sqrt(head_dim))."""

    def __init__(self, kv_cache: BaseKVCache, page_table: torch.Tensor, scale: float | None = None) -> None:
        self.kv_cache = kv_cache
        self.page_table = page_table
        self.scale = scale

    def prepare_metadata(self, batch: Batch) -> None:
        """Compute batch.attn_metadata (called once per batch, before the forward pass)."""
        batch.attn_metadata = make_metadata(batch, self.page_table.device)

    def softmax_scale(self, q: torch.Tensor) -> float:
        return self.scale if self.scale is not None else q.shape[-1] ** -0.5

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        """Store this layer's new k/v in the cache, then attend: q [T, Hq, D] -> [T, Hq, D]."""
