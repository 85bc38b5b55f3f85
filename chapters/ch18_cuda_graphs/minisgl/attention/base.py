"""The interface every attention backend implements (torch in chapter 5; Triton and flash-attn in chapter 17;
the static metadata that CUDA graphs replay, chapter 18)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, replace
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np
import torch

from minisgl.attention.utils import ints_to_device
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

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)}

    def first_rows(self, n: int) -> BaseAttnMetadata:
        """The metadata of the first n requests, as views (offset tensors, cu_seqlens_*, keep n + 1 entries)."""
        views = {name: t[: n + 1 if name.startswith("cu_seqlens") else n] for name, t in self.tensors().items()}
        return replace(self, **views)


def make_metadata(batch: Batch, device: torch.device | str) -> BaseAttnMetadata:
    """Offsets and lengths of the batch: prefix sums of new-token counts (q) and attended lengths (k).

    Built on the CPU from Python ints (prefix sums with itertools.accumulate), packed into one int32 tensor
    and one int64 tensor, and copied with non_blocking=True: two host-to-device copies per batch instead of
    one per field, since every copy and every small op costs the host microseconds a decode step cannot spare.
    (A blocking copy to the GPU would also wait for everything already queued there; chapter 11 overlaps that
    time away.) The fields are views of the two copies.
    """
    extend = [r.extend_len for r in batch.reqs]
    seq_lens = [r.device_len for r in batch.reqs]
    n = len(extend)
    packed = [0, *accumulate(extend), 0, *accumulate(seq_lens), *seq_lens, *(r.cached_len for r in batch.reqs)]
    ints = ints_to_device(packed, np.int32, device)
    rows = ints_to_device([r.table_idx for r in batch.reqs], np.int64, device)
    cu_q, cu_k, lens, cached = ints.split([n + 1, n + 1, n, n])
    return BaseAttnMetadata(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seq_lens=lens, cached_lens=cached, table_idx=rows,
                            max_seqlen_q=max(extend), max_seqlen_k=max(seq_lens))


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

    # CUDA graphs (chapter 18). A captured decode step reads its metadata from the same buffers at every replay:
    # the backend keeps one static copy, big enough for the largest captured batch at the longest length.

    def init_capture_graph(self, batch: Batch) -> None:
        """Allocate the static metadata from `batch`: the largest captured batch, every request at full row
        length, so the metadata of any later decode batch fits inside it (Python ints such as max_seqlen_k
        stay at these values in every replay)."""
        self.prepare_metadata(batch)
        self.graph_metadata = batch.attn_metadata

    def prepare_for_capture(self, batch: Batch) -> None:
        """Point the batch at views of the static metadata (its first batch.size requests)."""
        batch.attn_metadata = self.graph_metadata.first_rows(batch.size)

    def prepare_for_replay(self, batch: Batch) -> None:
        """Compute the (padded) batch's metadata and copy it into the static buffers the graph reads."""
        # TODO(ch18): prepare_metadata(batch), then copy each of its tensors into the leading corner of the
        # static tensor of the same name (a block table may be narrower than the static one).
        raise NotImplementedError("TODO(ch18): BaseAttnBackend.prepare_for_replay")
