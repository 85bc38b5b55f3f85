"""Admitting waiting requests into prefill batches: first come, first served, within a token budget."""

from __future__ import annotations

from collections import deque

from minisgl.core import Batch, Req
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.table import TableManager
from minisgl.scheduler.utils import PendingReq


class PrefillAdder:
    """Builds one prefill batch. Admission never lets the KV pool run dry later: a request is admitted only
    if the free slots cover everything it will ever need on top of what is already promised (`reserved`).
    Needs are counted in whole pages: a request's last page is taken whole even if it fills only part of it."""

    def __init__(self, token_budget: int, table: TableManager, cache: CacheManager, reserved: int) -> None:
        self.token_budget = token_budget
        self.table = table
        self.cache = cache
        self.reserved = reserved
        self.reqs: list[Req] = []

    def try_add_one(self, pending: PendingReq) -> Req | None:
        """Admit `pending` into this batch, or return None (changing nothing) if it does not fit.

        The longest cached prefix of its prompt is reused: those tokens are neither computed (budget) nor
        allocated (reservation), and the prefix stays locked until the request hands it back."""
        if self.table.available_size == 0:
            return None
        ids = pending.input_ids.tolist()
        handle, slots = self.cache.match_req(ids)
        cached = handle.cached_len
        if len(ids) - cached > self.token_budget:
            return None
        need = self.cache.slots_to_grow(cached, pending.slots_needed)
        self.cache.lock(handle)  # first: a locked prefix is no longer evictable, so it no longer counts as room
        if self.reserved + need > self.cache.available_size:
            self.cache.unlock(handle)
            return None
        row = self.table.allocate()
        self.table.token_pool[row, : len(ids)] = pending.input_ids.to(self.table.token_pool.device, non_blocking=True)
        self.cache.map_slots(row, 0, slots)
        req = Req(pending.input_ids, row, cached, pending.sampling_params.max_tokens, pending.uid,
                  pending.sampling_params, cache_handle=handle)
        self.token_budget -= len(ids) - cached
        self.reserved += need
        self.reqs.append(req)
        return req


class PrefillManager:
    def __init__(self, table: TableManager, cache: CacheManager, max_extend_tokens: int) -> None:
        self.table = table
        self.cache = cache
        self.max_extend_tokens = max_extend_tokens
        self.pending: deque[PendingReq] = deque()

    def add(self, pending: PendingReq) -> None:
        self.pending.append(pending)

    def schedule_next_batch(self, reserved: int) -> Batch | None:
        """A prefill batch of waiting requests in arrival order, or None if the first one cannot start yet."""
        adder = PrefillAdder(self.max_extend_tokens, self.table, self.cache, reserved)
        # No overtaking: stop at the first request that does not fit, so a long request cannot starve.
        while self.pending and adder.try_add_one(self.pending[0]) is not None:
            self.pending.popleft()
        return Batch(adder.reqs, "prefill") if adder.reqs else None
