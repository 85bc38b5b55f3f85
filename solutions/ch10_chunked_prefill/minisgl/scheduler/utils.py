"""Small types the scheduler passes around."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from minisgl.core import SamplingParams

if TYPE_CHECKING:
    from minisgl.scheduler.prefill import ChunkedReq


@dataclass
class PendingReq:
    """A request waiting for (more of) its prefill: not admitted yet, or admitted and part-way through its
    prompt (chunked_req: the chunk that ran last, which holds its row, pages and cache handle)."""

    uid: int
    input_ids: torch.Tensor  # CPU int32 prompt
    sampling_params: SamplingParams
    chunked_req: ChunkedReq | None = None

    @property
    def slots_needed(self) -> int:
        """KV slots over its whole life: the prompt, then one per decode step (the last token is never cached)."""
        return len(self.input_ids) + self.sampling_params.max_tokens - 1
