"""Speculative decoding in the scheduler (chapter 26): turning a decode batch into a verify batch, and back.

In a decode step, a proposer guesses up to k next tokens of each running request that may speculate (n-gram lookup
in its own tokens, or a small draft model; spec/). The guesses are written into the token pool after the request's
last token, given KV pages like any new tokens, and the whole batch runs as one "verify" pass that computes every
row's last token and its drafts, with logits at every position. A greedy row keeps the drafts that equal the
model's own argmax, a sampled row those that rejection sampling accepts; either way it gains the kept drafts and
one token of the model's own, 1 to k + 1 tokens for one forward pass. The pages of rejected drafts go back at once.

Rows that cannot speculate (a grammar, log-probabilities, logit processors, min_p, a seeded sample) or found no
draft decode one token in the same pass, sampled as ever; a step where no row has a draft is an ordinary decode
step. With CUDA graphs both kinds of step replay a graph: verify steps their own, each row padded to k + 1 tokens
(captured when the scheduler is made). Prefill and mixed batches never speculate.

A verify step is launched like any batch: the pass and its decisions are queued and the launch returns without
waiting (verify); the host reads the decisions back once, when it processes the step, and only then moves the
requests on (settle). What needs them waits there: the drafts of step t+1 are guessed from the tokens step t
produced, and its positions and pages follow from t's accepted counts, so the overlap loop processes a verify step
before it schedules the next; the host's other work (replies, new requests) runs while the device verifies.

A step that gains nothing costs more than a decode step: one where no row found a draft (n-gram lookup on text that
repeats nothing) is a decode step processed before the next is scheduled, overlap lost for nothing; one where every
draft was rejected is a verify step for one token a row. So such steps back off (SpecConfig.backoff): after m of
them in a row the next 2^m - 1 steps (at most MAX_SKIPPED_STEPS) do not propose at all and run as ordinary decode
steps, with overlap; a step that keeps a draft ends the backoff.
"""

from __future__ import annotations

from collections.abc import Container

import numpy as np
import torch

from minisgl.attention.utils import ints_to_device
from minisgl.core import Batch, Drafts, Req, SamplingParams
from minisgl.engine.engine import Engine
from minisgl.scheduler.cache import CacheManager
from minisgl.spec import SpecConfig, SpecStats, make_proposer, verify_batch

MAX_SKIPPED_STEPS = 15  # the longest backoff: one step in 16 still looks for drafts


def can_speculate(params: SamplingParams) -> bool:
    """Whether a request's drafts can be verified here. Not when its token is more than a draw from the model's
    distribution after temperature, top-k and top-p: logit processors (penalties, logit_bias, min_tokens), min_p,
    a grammar (checked by draft_lengths) or log-probabilities (returned for sampled tokens only). Nor a seeded
    sample, whose draws depend on (seed, position) so that it is reproducible in any batch: rejection sampling
    would draw differently. A greedy request ignores its seed."""
    return not (params.changes_logits or params.logprobs or params.min_p > 0
                or (params.seed is not None and not params.is_greedy))


class Speculation:
    """The proposer of draft tokens, and what speculation did so far (stats)."""

    def __init__(self, config: SpecConfig, engine: Engine, cache: CacheManager) -> None:
        self.config = config
        self.engine, self.cache = engine, cache
        self.proposer = make_proposer(config, engine)
        engine.capture_verify_graphs(config.num_tokens)
        self.stats = SpecStats()
        # uid -> device_len at launch, for the requests of a verify step launched and not yet settled: their pages
        # cover their drafts until then
        self.in_flight: dict[int, int] = {}
        self.misses = 0  # steps in a row that looked for drafts and found none
        self.skips = 0  # steps left that will not look (the backoff)

    @property
    def will_propose(self) -> bool:
        """Whether the next decode step looks for drafts: if so, it needs the tokens of the step before it on the
        host (the scheduler processes that step first); if not, it decodes with overlap."""
        return self.skips == 0

    def draft_lengths(self, reqs: list[Req], constrained: Container[int]) -> list[int]:
        """How many drafts each running request may take this step (0: it decodes one token); `constrained`: the
        uids of the requests with a grammar."""
        # TODO(ch26): k = self.config.num_tokens for a request that can_speculate(its sampling params) and has no
        # grammar (its uid not in constrained); capped at remain_len - 1, so that the KV the step writes (the last
        # token and the drafts) stays below max_device_len - 1, inside what admission reserved, and every token the
        # step can add fits in max_tokens. 0 for every other request (never below 0).
        raise NotImplementedError("TODO(ch26): Speculation.draft_lengths")

    def fit_drafts(self, reqs: list[Req], drafts: list[list[int]]) -> list[list[int]]:
        """Drafts take only pages the pool can give now, beyond those the step needs anyway (one token per row):
        rows in order keep theirs while they fit, a row that does not fit decodes without drafts. Conservative
        admission reserved every draft's page already; optimistic admission (chapter 23) may not have."""
        cache = self.cache
        room = cache.available_size - cache.slots_for(reqs)
        fitted = []
        for req, draft in zip(reqs, drafts):
            extra = cache.slots_to_grow(req.device_len, req.device_len + len(draft))
            if extra > room:
                draft = []
            else:
                room -= extra
            fitted.append(draft)
        return fitted

    def speculate(self, batch: Batch, constrained: Container[int]) -> Batch:
        """The decode batch, or the verify batch of its rows when any of them gets drafts. A row's drafts go into
        its token-pool row after its last token, and its device_len covers them: the pass computes them."""
        if self.skips:
            self.skips -= 1
            return batch
        ks = self.draft_lengths(batch.reqs, constrained)
        if not any(ks):
            return batch
        proposer = self.proposer
        proposed = proposer.propose(batch.reqs, ks)
        if not any(proposed):
            self.gained(False)
        drafts = self.fit_drafts(batch.reqs, proposed)
        if not any(drafts):
            for req, k in zip(batch.reqs, ks):
                if k:
                    proposer.accepted(req, 0)  # proposed, then dropped: the draft keeps none of its guesses
            return batch
        feed = [v for r, d in zip(batch.reqs, drafts) for j in range(len(d)) for v in (r.table_idx, r.device_len + j)]
        device = self.engine.device
        rows, cols = ints_to_device(feed, np.int64, device).view(-1, 2).unbind(1)
        self.engine.token_pool[rows, cols] = ints_to_device([t for d in drafts for t in d], np.int32, device)
        for req, draft in zip(batch.reqs, drafts):
            req.device_len += len(draft)
        verify = Batch(batch.reqs, "verify")
        verify.drafts = Drafts(drafts, proposer.draft_probs, ks)
        return verify

    def gained(self, kept: bool) -> None:
        """A step that looked for drafts kept some (the backoff ends) or gained nothing (it grows)."""
        if self.config.backoff:
            self.misses = 0 if kept else self.misses + 1
            self.skips = min(2 ** self.misses - 1, MAX_SKIPPED_STEPS)

    def verify(self, batch: Batch, ends: list[int]) -> torch.Tensor:
        """Run a prepared verify batch (`ends`: each row's device_len before its pages were allocated) and queue its
        decisions: [2, rows] on the device, accepted drafts and new token per row. Nothing waits for the device here;
        settle moves the requests on once the scheduler has read the decisions back."""
        decided = verify_batch(self.engine, batch, batch.drafts.tokens, batch.drafts.probs)
        batch.drafts = batch.drafts._replace(ends=ends, decided=decided)
        self.in_flight.update((r.uid, r.device_len) for r in batch.reqs)
        return decided

    def settle(self, batch: Batch, decided: list[list[int]], gone: Container[int]) -> list[list[int]]:
        """A verify batch's decisions, read back ([accepted per row], [new token per row]): the requests move on by
        what they gained (Engine.complete_verify), the pages of their rejected drafts go back, the proposer hears what
        was kept. Returns each row's run: its kept drafts, then its new token. A request in `gone` (the uids of those
        freed since the batch was launched: finished, aborted, retracted) gave back its pages already: left alone."""
        accepted, tokens = decided
        drafts, _, ks, ends, on_device = batch.drafts
        runs = [d[:n] + [t] for d, n, t in zip(drafts, accepted, tokens)]
        live = [i for i, r in enumerate(batch.reqs) if r.uid not in gone]
        for r in batch.reqs:
            self.in_flight.pop(r.uid, None)
        if len(live) < len(batch.reqs):  # the scheduler skips their runs
            on_device = on_device[:, ints_to_device(live, np.int64, on_device.device)]
            batch = Batch([batch.reqs[i] for i in live], "verify")
            accepted, drafts, ks, ends = ([xs[i] for i in live] for xs in (accepted, drafts, ks, ends))
        self.engine.complete_verify(batch, accepted, on_device[1])
        for req, end, n, draft, k in zip(batch.reqs, ends, accepted, drafts, ks):
            self.cache.free_rejected(req, end)
            if k:
                self.proposer.accepted(req, n if draft else 0)
        self.gained(any(accepted))
        self.stats.count_step(drafts, accepted)
        return runs

    def release(self, req: Req) -> None:
        """The request gave its row back (finished, aborted or retracted): the proposer forgets what it keeps. If a
        verify step of it is still in flight, the pages past its cached positions (its drafts') go back too: settle
        will leave it alone."""
        end = self.in_flight.pop(req.uid, None)
        if end is not None:
            self.cache.free_rejected(req, end)
        self.proposer.release(req)

    # What every Stage 5 feature of the scheduler offers it (see Scheduler.features).
    def forget(self, uid: int) -> None:
        pass  # all it keeps for a request is tied to its row: released with it (release)

    def clear(self) -> None:
        self.in_flight.clear()
        self.proposer.reset()
        self.misses = self.skips = 0

    def status(self) -> dict[str, int]:
        stats = self.stats  # since the scheduler was made
        return {"verify_steps": stats.verify_steps, "draft_tokens_proposed": stats.proposed,
                "draft_tokens_accepted": stats.accepted}
