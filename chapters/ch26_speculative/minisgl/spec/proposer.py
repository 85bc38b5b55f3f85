"""The proposer interface: draft tokens for running requests, and what a proposer hears back after each step."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from minisgl.core import Req


class Proposer(ABC):
    """Guesses the next tokens of running requests. Their host copy (req.input_ids) holds every token so far, the
    last one not yet computed by the target: the drafts are guesses for the tokens after it."""

    # q of the last proposal, per request: [len(drafts), vocab] float32 rows on the engine's device when its drafts
    # were sampled from a distribution (a draft model on a sampled request); None when each draft is the one token
    # the proposer was sure of (n-gram lookup, greedy requests), a point mass.
    draft_probs: list[torch.Tensor | None]

    @abstractmethod
    def propose(self, reqs: Sequence[Req], ks: Sequence[int]) -> list[list[int]]:
        """At most ks[i] draft tokens for reqs[i] (none where ks[i] is 0, and maybe fewer: n-gram finds what it
        finds). Sets draft_probs."""

    def accepted(self, req: Req, n: int) -> None:
        """The target accepted the first n of req's last drafts (then added a token of its own)."""

    def release(self, req: Req) -> None:
        """The request left (finished, aborted, retracted): forget what is kept for it."""

    def reset(self) -> None:
        """Every request left at once (the scheduler's abort_all)."""
