"""Small types the scheduler passes around."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.core import SamplingParams


@dataclass
class PendingReq:
    """A request that has been accepted but not admitted yet: no table row, no KV slots."""

    uid: int
    input_ids: torch.Tensor  # CPU int32 prompt
    sampling_params: SamplingParams

    @property
    def slots_needed(self) -> int:
        """KV slots over its whole life: the prompt, then one per decode step (the last token is never cached)."""
        return len(self.input_ids) + self.sampling_params.max_tokens - 1
