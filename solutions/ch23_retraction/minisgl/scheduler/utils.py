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
    prompt (chunked_req: the chunk that ran last, which holds its row, pages and cache handle).

    A retracted request (chapter 23) waits here again with input_ids = its prompt and every token it generated
    so far; prompt_len remembers where its prompt ends, so that its output and its remaining budget of tokens
    are counted from there."""

    uid: int
    input_ids: torch.Tensor  # CPU int32 prompt (then, after a retraction, the tokens generated so far)
    sampling_params: SamplingParams
    chunked_req: ChunkedReq | None = None
    prompt_len: int = -1  # where the prompt ends in input_ids; -1: all of input_ids is the prompt

    def __post_init__(self) -> None:
        if self.prompt_len < 0:
            self.prompt_len = len(self.input_ids)

    @property
    def output_len(self) -> int:
        """Tokens it may still generate: max_tokens less those generated before a retraction."""
        return self.sampling_params.max_tokens - (len(self.input_ids) - self.prompt_len)

    @property
    def slots_needed(self) -> int:
        """KV slots over its whole life: the prompt, then one per decode step (the last token is never cached)."""
        return self.prompt_len + self.sampling_params.max_tokens - 1
