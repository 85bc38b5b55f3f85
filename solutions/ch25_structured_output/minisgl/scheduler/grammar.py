"""Structured output in the scheduler (chapter 25): a matcher per constrained request, a bitmask per batch.

A request with a grammar gets a matcher when it is queued (kept by uid, so it survives a retraction with the tokens
it has accepted). When a batch is prepared, each of its sampling rows with a grammar writes the tokens its grammar
allows next into the batch's bitmask (the sampler masks every other token); when the batch's tokens come back,
each advances its matcher, and a request whose grammar is complete has finished. The mask of step t+1 needs step
t's token, so while a constrained request lives the overlap loop processes each step before it schedules the next.
The grammars themselves (compiling, matching, the bitmask) are constrained/grammar.py's.
"""

from __future__ import annotations

from minisgl.constrained.grammar import Constraint, GrammarCache, GrammarSpec, allocate_bitmask
from minisgl.core import Batch, GrammarMask, Req, SamplingParams
from minisgl.engine.engine import Engine
from minisgl.scheduler.utils import PendingReq


class GrammarManager:
    """The matchers of the requests with a grammar, from add until the request leaves (finished or aborted)."""

    def __init__(self, engine: Engine) -> None:
        self.model_path = engine.config.model_path
        self.vocab_size = engine.model_config.vocab_size
        self.matchers: dict[int, Constraint] = {}  # uid -> its grammar's matcher
        self._cache: GrammarCache | None = None  # made on the first request with a grammar (it loads the tokenizer)

    @property
    def cache(self) -> GrammarCache:
        """The compiled grammars, against the model's tokenizer (loaded on first use)."""
        if self._cache is None:
            from transformers import AutoTokenizer

            self._cache = GrammarCache(AutoTokenizer.from_pretrained(self.model_path), self.vocab_size)
        return self._cache

    def check(self, params: SamplingParams) -> None:
        """ValueError if the request's grammar does not compile (compiled once, then cached)."""
        if params.grammar is not None:
            self.cache.compile(GrammarSpec(*params.grammar))

    def add(self, pending: PendingReq) -> None:
        if pending.sampling_params.grammar is not None:
            self.matchers[pending.uid] = self.cache.matcher(GrammarSpec(*pending.sampling_params.grammar))

    def mask(self, batch: Batch) -> GrammarMask | None:
        """The batch's rows that sample a token and have a grammar, in batch order, and their bitmask: bitmask[k]
        holds what the grammar of row rows[k] allows next. None when no such row is in the batch."""
        # TODO(ch25): the rows i of batch.reqs whose request samples (req.samples: a chunk of a prompt does not) and
        # has a matcher in self.matchers (by uid); None if there are none. Otherwise allocate_bitmask(number of
        # rows, self.vocab_size) and let each row's matcher fill its line (line k for the k-th such row).
        # >>> solution
        rows = [i for i, r in enumerate(batch.reqs) if r.samples and r.uid in self.matchers]
        if not rows:
            return None
        bitmask = allocate_bitmask(len(rows), self.vocab_size)
        for k, i in enumerate(rows):
            self.matchers[batch.reqs[i].uid].fill(bitmask, k)
        return GrammarMask(rows, bitmask)
        # <<< solution

    def advance(self, req: Req, token: int) -> None:
        """The request's matcher takes its new token. A token its grammar refuses means the mask was not applied: a
        RuntimeError naming the request and the token, never a silent walk off the grammar."""
        # TODO(ch25): accept the token on the request's matcher (self.matchers[req.uid]); if it refuses, raise
        # RuntimeError(f"request {uid}: token {token} is outside its grammar"). Whether the grammar is complete is
        # read by the scheduler's finish rule, right after.
        # >>> solution
        if not self.matchers[req.uid].accept(token):
            raise RuntimeError(f"request {req.uid}: token {token} is outside its grammar")
        # <<< solution

    # What every Stage 5 feature of the scheduler offers it (see Scheduler.features).
    def forget(self, uid: int) -> None:
        self.matchers.pop(uid, None)

    def clear(self) -> None:
        self.matchers.clear()

    def status(self) -> dict[str, int]:
        return {}
