"""Admission (chapter 23): how much room the running requests are promised, and who gives way when a decode step
cannot get its pages.

Conservative admission (the default, chapters 7-22) promises every running request all the KV it may still write:
a decode step always finds its pages. Optimistic admission promises a share of it, the new-token ratio (retract.py),
so that more requests run at once when answers end long before max_tokens. Then a decode step may find the pool
short: the scheduler retracts running requests (pick_victim says which; their computed prefix stays in the prefix
cache), puts them back at the front of the queue and recomputes them later. A request retracted max_retractions
times is pinned: it keeps its whole reservation and is never retracted again.

The scheduler asks this object two things each step: how many slots the running requests reserve while a prompt
waits (reserved), and which decode batch can run now (decode_batch). Retracting is the scheduler's own work (it
owns the queues and the rows): make_room calls back into it, and the scheduler reports each retraction here.
"""

from __future__ import annotations

from collections.abc import Callable

from minisgl.core import Batch, Req
from minisgl.env import ENV
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.decode import DecodeManager
from minisgl.scheduler.prefill import PrefillManager
from minisgl.scheduler.retract import NewTokenRatio, pick_victim


class Admission:
    """The admission policy, and what retraction keeps track of: per request, the times it was retracted (while it
    lives) and whether it is pinned; in all, the retractions since the scheduler was made."""

    def __init__(self, config: SchedulerConfig, prefill: PrefillManager, decode: DecodeManager, cache: CacheManager,
                 retract: Callable[[Req], None]) -> None:
        self.optimistic = config.optimistic
        self.policy = config.retraction_policy
        self.max_retractions = config.max_retractions
        self.new_token_ratio = config.new_token_ratio or NewTokenRatio(ENV.INIT_NEW_TOKEN_RATIO)
        self.prefill, self.decode, self.cache = prefill, decode, cache
        self.retract = retract  # the scheduler's: takes a running request out and requeues it
        self.retractions: dict[int, int] = {}  # uid -> times retracted
        self.pinned: set[int] = set()  # uids retracted max_retractions times: never retracted again
        self.num_retractions = 0

    def idle(self) -> None:
        """Nothing waits or runs: the next burst starts from the initial estimate."""
        self.new_token_ratio.reset()

    def reserved(self) -> int:
        """KV slots promised to the running requests: all they may still write (conservative), or an estimate
        (optimistic). A sum over all of them: only worth it when a prompt waits."""
        if not self.prefill.pending:
            return 0
        ratio = self.new_token_ratio.current if self.optimistic else 1.0
        return self.decode.reserved_slots(ratio, self.pinned)

    def chunk_slots(self) -> int:
        """Slots that the prompt part-way through its chunks still needs for the rest of the prompt (0 if there is
        none): in a mixed batch it shares the step with the decode rows."""
        pending = self.prefill.pending
        if not self.optimistic or not pending or pending[0].chunked_req is None:
            return 0
        return self.cache.slots_to_grow(pending[0].chunked_req.cached_len, len(pending[0].input_ids))

    def decode_batch(self, extra: int = 0) -> tuple[Batch | None, bool]:
        """The decode batch of the running requests, and whether its pages (and `extra` more slots) exist now.
        Conservative admission reserved them; optimistic admission retracts requests until they fit."""
        batch = self.decode.schedule_next_batch()
        if not self.optimistic:
            return batch, True
        if batch is not None:
            batch = self.make_room(batch, extra)
        need = extra + (self.cache.slots_for(batch.reqs) if batch is not None else 0)
        return batch, need <= self.cache.available_size

    def make_room(self, batch: Batch, extra: int = 0) -> Batch | None:
        """Retract requests of a decode batch until the pages of its next step, plus `extra` slots, fit in what the
        pool can give: free pages and unlocked cached ones. `extra` is what a prompt part-way through its chunks
        still needs when it runs in the same step as these rows (a mixed batch, chapter 21); 0 otherwise.

        The last row stays when extra is 0: the step would have nothing left to run, and the request would only be
        admitted again into the same room. With extra above 0 the step still has the chunk to run, so the last row
        may go too. Then the new-token ratio rises (after a retraction) or decays (a step that fits as it is).
        Returns the rows left as a decode batch, None if none is left."""
        cache = self.cache
        reqs = list(batch.reqs)
        retracted = False
        while reqs and cache.slots_for(reqs) + extra > cache.available_size:
            if len(reqs) == 1 and not extra:
                break
            victim = pick_victim(reqs, self.policy, self.pinned)
            if victim is None:
                break
            reqs.remove(victim)
            self.retract(victim)
            retracted = True
        if retracted:
            self.new_token_ratio.after_retraction(self.decode.running)
        else:
            self.new_token_ratio.step()
        return Batch(reqs, "decode") if reqs else None

    def retracted(self, uid: int) -> None:
        """The scheduler retracted the request: count it, and pin it once retracted max_retractions times."""
        count = self.retractions[uid] = self.retractions.get(uid, 0) + 1
        if count >= self.max_retractions:
            self.pinned.add(uid)
        self.num_retractions += 1

    # What every Stage 5 feature of the scheduler offers it (see Scheduler.features).
    def forget(self, uid: int) -> None:
        """The request left for good (finished or aborted): nothing of its retractions is kept."""
        self.retractions.pop(uid, None)
        self.pinned.discard(uid)

    def clear(self) -> None:
        self.retractions.clear()
        self.pinned.clear()

    def status(self) -> dict[str, int]:
        # since the scheduler was made: retractions (0 when conservative); chapter 27: the prefill's prompt tokens
        # admitted and cached (admission is where a prompt meets the prefix cache)
        return {"retractions": self.num_retractions} | self.prefill.status()
