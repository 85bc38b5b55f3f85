"""Admitting waiting requests into prefill batches within a token budget, chunking prompts that do not fit.

A batch computes at most `max_extend_tokens` new tokens. A prompt longer than what is left of that budget
runs in chunks: each chunk is a ChunkedReq (it computes KV but samples nothing), and the request goes
back to the front of the queue until its last chunk runs as an ordinary Req.
"""

from __future__ import annotations

from collections import deque

import torch

from minisgl.core import Batch, Req
from minisgl.kvcache.prefix_cache import CacheHandle
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.table import TableManager
from minisgl.scheduler.utils import PendingReq


class ChunkedReq(Req):
    """A prefill chunk that stops short of the prompt's end: its sampled token is meaningless."""

    def append_host(self, next_token: int) -> None:
        # TODO(ch10): a chunk's token must never be recorded: raise RuntimeError.
        raise NotImplementedError("TODO(ch10): ChunkedReq.append_host")

    @property
    def can_decode(self) -> bool:
        # TODO(ch10): a chunk never decodes (so it never joins the decode set, and the engine does not feed its
        # sampled token back into the token pool, where the prompt's next token sits).
        raise NotImplementedError("TODO(ch10): ChunkedReq.can_decode")


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

    def _write_ids(self, row: int, ids: torch.Tensor, start: int, end: int) -> None:
        """Token ids [start, end) of a prompt into its token-pool row. non_blocking: a blocking copy to the GPU
        would wait for the batch running there, and admission runs while it does (chapter 11). Nothing to copy
        (no cached prefix) launches nothing."""
        if end > start:
            self.table.token_pool[row, start:end] = ids[start:end].to(self.table.token_pool.device,
                                                                       non_blocking=True)

    def _try_allocate_one(self, pending: PendingReq) -> tuple[CacheHandle, int] | None:
        """Admission of a new request: a free row, its cached prefix locked, and room for everything it will
        need. Returns (handle, row), with the prefix already in the row; None (nothing changed) if it does
        not fit."""
        if self.table.available_size == 0:
            return None
        ids = pending.input_ids.tolist()
        handle, slots = self.cache.match_req(ids)
        need = self.cache.slots_to_grow(handle.cached_len, pending.slots_needed)
        self.cache.lock(handle)  # first: a locked prefix is no longer evictable, so it no longer counts as room
        if self.reserved + need > self.cache.available_size:
            self.cache.unlock(handle)
            return None
        row = self.table.allocate()
        cached = handle.cached_len
        self._write_ids(row, pending.input_ids, 0, cached)
        self.cache.map_slots(row, 0, slots)
        return handle, row

    def _add_one_req(self, pending: PendingReq, handle: CacheHandle, row: int, cached_len: int) -> Req:
        """The next piece of `pending` for this batch, from position cached_len: its whole remaining prompt if
        the budget allows (a Req), else as much as the budget allows (a ChunkedReq)."""
        # TODO(ch10): chunk = min(token budget, remaining prompt); a chunk shorter than the rest makes a
        # ChunkedReq, else a Req. Charge the chunk to the budget; reserve the slots it still needs up to
        # pending.slots_needed (cache.slots_to_grow from cached_len); write only this chunk's tokens into the
        # token pool (_write_ids). The request's input_ids run up to the chunk's end; it keeps handle, row and
        # cached_len.
        raise NotImplementedError("TODO(ch10): PrefillAdder._add_one_req")

    def try_add_one(self, pending: PendingReq) -> Req | None:
        """Add the next piece of `pending` to this batch, or return None (changing nothing)."""
        # TODO(ch10): nothing when the budget is spent. A request already being chunked continues from its
        # chunked_req's cached_len with the same row and cache handle: no prefix match, no admission check
        # (it was admitted with everything reserved). Otherwise admit it with _try_allocate_one first.
        raise NotImplementedError("TODO(ch10): PrefillAdder.try_add_one")


class PrefillManager:
    def __init__(self, table: TableManager, cache: CacheManager, max_extend_tokens: int) -> None:
        self.table = table
        self.cache = cache
        self.max_extend_tokens = max_extend_tokens
        self.pending: deque[PendingReq] = deque()

    def add(self, pending: PendingReq) -> None:
        self.pending.append(pending)

    def schedule_next_batch(self, reserved: int) -> Batch | None:
        """A prefill batch of waiting requests in arrival order, or None if the first one cannot start yet.
        A request cut short by the budget goes back to the front: its next chunk runs first next time."""
        adder = PrefillAdder(self.max_extend_tokens, self.table, self.cache, reserved)
        unfinished: list[PendingReq] = []
        # No overtaking: stop at the first request that does not fit, so a long request cannot starve.
        while self.pending and (req := adder.try_add_one(self.pending[0])) is not None:
            pending = self.pending.popleft()
            pending.chunked_req = req if isinstance(req, ChunkedReq) else None
            if pending.chunked_req is not None:
                unfinished.append(pending)
        self.pending.extendleft(reversed(unfinished))
        return Batch(adder.reqs, "prefill") if adder.reqs else None

    def abort(self, uid: int) -> PendingReq | None:
        """Take a waiting request out of the queue (its chunked_req, if any, still holds a row and pages)."""
        for pending in self.pending:
            if pending.uid == uid:
                self.pending.remove(pending)
                return pending
        return None
