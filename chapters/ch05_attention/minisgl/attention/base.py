"""The interface every attention backend implements (torch now; Triton and flash-attn in chapter 17)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from minisgl.core import Batch


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


class BaseAttnBackend(ABC):
    @abstractmethod
    def prepare_metadata(self, batch: Batch) -> None:
        """Compute batch.attn_metadata (called once per batch, before the forward pass)."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        """Store this layer's new k/v in the cache, then attend: q [T, Hq, D] -> [T, Hq, D]."""
