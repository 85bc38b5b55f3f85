"""Admitting waiting requests into prefill batches: first come, first served, within a token budget."""

from __future__ import annotations

from collections import deque

from minisgl.core import Batch, Req
from minisgl.kvcache.naive_cache import NaiveCacheManager
from minisgl.scheduler.table import TableManager
from minisgl.scheduler.utils import PendingReq


class PrefillAdder:
    """Builds one prefill batch. Admission never lets the KV pool run dry later: a request is admitted only
    if the free slots cover everything it will ever need on top of what is already promised (`reserved`)."""

    def __init__(self, token_budget: int, table: TableManager, cache: NaiveCacheManager, reserved: int) -> None:
        self.token_budget = token_budget
        self.table = table
        self.cache = cache
        self.reserved = reserved
        self.reqs: list[Req] = []

    def try_add_one(self, pending: PendingReq) -> Req | None:
        """Admit `pending` into this batch, or return None (changing nothing) if it does not fit."""
        # TODO(ch07): refuse if the prompt exceeds the remaining token budget, no table row is free, or the free
        # slots do not cover reserved + pending.slots_needed. Otherwise take a row, write the prompt into the
        # token pool, make the Req (nothing cached), charge the budget and the reservation, and keep it.
        # >>> solution
        prompt_len = len(pending.input_ids)
        if prompt_len > self.token_budget or self.table.available_size == 0:
            return None
        if self.cache.available_size < self.reserved + pending.slots_needed:
            return None
        row = self.table.allocate()
        self.table.token_pool[row, :prompt_len] = pending.input_ids.to(self.table.token_pool.device, non_blocking=True)
        req = Req(pending.input_ids, row, 0, pending.sampling_params.max_tokens, pending.uid,
                  pending.sampling_params)
        self.token_budget -= prompt_len
        self.reserved += pending.slots_needed
        self.reqs.append(req)
        return req
        # <<< solution


class PrefillManager:
    def __init__(self, table: TableManager, cache: NaiveCacheManager, max_extend_tokens: int) -> None:
        self.table = table
        self.cache = cache
        self.max_extend_tokens = max_extend_tokens
        self.pending: deque[PendingReq] = deque()

    def add(self, pending: PendingReq) -> None:
        self.pending.append(pending)

    def schedule_next_batch(self, reserved: int) -> Batch | None:
        """A prefill batch of waiting requests in arrival order, or None if the first one cannot start yet."""
        # TODO(ch07): offer the queue's requests to one PrefillAdder in order; stop at the first that does not
        # fit (no overtaking, so a long request cannot starve); pop the admitted ones.
        # >>> solution
        adder = PrefillAdder(self.max_extend_tokens, self.table, self.cache, reserved)
        while self.pending and adder.try_add_one(self.pending[0]) is not None:
            self.pending.popleft()
        return Batch(adder.reqs, "prefill") if adder.reqs else None
        # <<< solution
