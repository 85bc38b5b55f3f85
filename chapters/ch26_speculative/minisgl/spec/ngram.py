"""N-gram proposals (prompt lookup decoding): the request's own text predicts its continuation.

Answers repeat their prompts (code being edited, a document being summarised, a list being continued) and
themselves. If the last few tokens occurred before, the tokens that followed them then are a good guess for what
follows now; guessing costs a scan of the request's tokens on the host and no model at all. Greedy and sampled
requests alike: a guess is a point mass, which the target accepts with its own probability of that token.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minisgl.core import Req
from minisgl.spec.config import SpecConfig
from minisgl.spec.proposer import Proposer


def ngram_lookup(tokens: Sequence[int] | np.ndarray, k: int, min_n: int, max_n: int) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the last n tokens, for the largest n in
    [min_n, max_n] that has one; [] when none does."""
    # TODO(ch26): for n from max_n down to min_n (an n of len(tokens) or more has no earlier occurrence): the
    # pattern is the last n tokens; find its latest occurrence that ends before the last token (never the suffix
    # matching itself) and return the (up to) k tokens that follow that occurrence, as a list of ints. [] if no n
    # finds one. `tokens` may be a list or a numpy array (the proposer passes the request's ids as one: compare
    # slices of a list, not of an array, whose == is elementwise).
    raise NotImplementedError("TODO(ch26): ngram_lookup")


class NgramProposer(Proposer):
    """Looks every request up in its own tokens. Deterministic and host-only: under tensor parallelism every rank
    proposes the same drafts from the same tokens, so the ranks stay in step."""

    def __init__(self, config: SpecConfig) -> None:
        self.min_n, self.max_n = config.min_n, config.max_n
        self.draft_probs = []

    def propose(self, reqs: Sequence[Req], ks: Sequence[int]) -> list[list[int]]:
        self.draft_probs = [None] * len(reqs)
        return [ngram_lookup(req.input_ids.numpy(), k, self.min_n, self.max_n) if k > 0 else []
                for req, k in zip(reqs, ks)]
