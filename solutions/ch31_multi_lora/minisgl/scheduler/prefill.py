"""Admitting waiting requests into prefill batches within a token budget, chunking prompts that do not fit.

A batch computes at most `max_extend_tokens` new tokens (from chapter 21, decode rows mixed into the batch
count too). A prompt longer than what is left of that budget runs in chunks: each chunk is a ChunkedReq (it
computes KV but samples nothing), and the request goes back to the front of the queue until its last chunk
runs as an ordinary Req.

Chapter 27 counts what the prefix cache saves: the prompt tokens of every request admitted and, of those, the
ones it found cached (status(): the server's /health shows them, and a router's benchmark reads them).

Chapter 28: a prefix found on the host tier is loaded back into fresh device pages at admission, before the
prefill that follows it, and counts as cached.

Chapter 31: a request with a LoRA adapter is admitted only once its adapter has an engine slot (LoraManager.acquire:
at most max_loras_per_batch distinct adapters among the live requests); until then it waits at the head of the
queue, so it is the next admitted once a slot frees. Its prefix match is keyed by its adapter (lora/prefix.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch

from minisgl.core import Batch, Req
from minisgl.kvcache.prefix_cache import CacheHandle
from minisgl.lora.manager import LoraManager
from minisgl.lora.prefix import prefix_key
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.table import TableManager
from minisgl.scheduler.utils import PendingReq


class ChunkedReq(Req):
    """A prefill chunk that stops short of the prompt's end: its sampled token is meaningless."""

    def append_host(self, next_token: int) -> None:
        raise RuntimeError(f"request {self.uid}: a prefill chunk has no output token")

    @property
    def can_decode(self) -> bool:
        return False

    @property
    def samples(self) -> bool:
        return False  # its last row is no request's next token: nothing to sample


class PrefillAdder:
    """Builds one prefill batch. Admission never lets the KV pool run dry later: a request is admitted only
    if the free slots cover everything it will ever need on top of what is already promised (`reserved`).
    Needs are counted in whole pages: a request's last page is taken whole even if it fills only part of it.
    With optimistic admission (chapter 23) `reserved` counts the running requests at an estimate: a newcomer
    still needs room for all of its own need, but the pool can run dry later, and the scheduler then retracts."""

    def __init__(self, token_budget: int, table: TableManager, cache: CacheManager, reserved: int,
                 lora: LoraManager | None = None, live_loras: frozenset[str | None] = frozenset()) -> None:
        self.token_budget = token_budget
        self.table = table
        self.cache = cache
        self.reserved = reserved
        self.reqs: list[Req] = []
        self.lora = lora  # chapter 31
        self.live_loras = set(live_loras)  # adapters of the requests admitted before this batch

    def _lora_slot(self, pending: PendingReq) -> tuple[int, int] | None:
        """Chapter 31: (adapter id, engine slot) of a request being admitted, (0, -1) without an adapter; None when
        its adapter cannot get a slot now."""
        name = pending.sampling_params.lora_name
        if name is None or self.lora is None:
            return 0, -1
        slot = self.lora.acquire(name, self.live_loras | {r.sampling_params.lora_name for r in self.reqs})
        return None if slot is None else (self.lora.lora_id(name), slot)

    def _write_ids(self, row: int, ids: torch.Tensor, start: int, end: int) -> None:
        """Token ids [start, end) of a prompt into its token-pool row. non_blocking: a blocking copy to the GPU
        would wait for the batch running there, and admission runs while it does (chapter 11). Nothing to copy
        (no cached prefix) launches nothing."""
        if end > start:
            self.table.token_pool[row, start:end] = ids[start:end].to(self.table.token_pool.device,
                                                                       non_blocking=True)

    def _try_allocate_one(self, pending: PendingReq) -> tuple[CacheHandle, int, tuple[int, int]] | None:
        """Admission of a new request: a free row, its adapter in a slot (chapter 31), its cached prefix locked,
        and room for everything it will need. Returns (handle, row, (adapter id, slot)), with the prefix already
        in the row; None if it does not fit (nothing changed, except that its adapter may have taken a free slot)."""
        if self.table.available_size == 0:
            return None
        lora = self._lora_slot(pending)
        if lora is None:
            return None
        ids = prefix_key(pending.input_ids.tolist(), lora[0])
        handle, slots, host_hit = self.cache.match_tiers(ids)
        # The part on the host only (chapter 28) needs device pages like the tokens still to compute.
        need = self.cache.slots_to_grow(handle.cached_len, pending.slots_needed)
        locked = host_hit or handle
        self.cache.lock(locked)  # first: a locked prefix is no longer evictable, so it no longer counts as room
        if self.reserved + need > self.cache.available_size:
            self.cache.unlock(locked)
            return None
        if host_hit is not None:  # loaded back now, so the prefill computes only what comes after it
            handle, slots = self.cache.hicache.load_back(handle, host_hit)
        row = self.table.allocate()
        cached = handle.cached_len
        self._write_ids(row, pending.input_ids, 0, cached)
        self.cache.map_slots(row, 0, slots)
        return handle, row, lora

    def _add_one_req(self, pending: PendingReq, handle: CacheHandle, row: int, cached_len: int,
                     lora: tuple[int, int] = (0, -1)) -> Req:
        """The next piece of `pending` for this batch, from position cached_len: its whole remaining prompt if
        the budget allows (a Req), else as much as the budget allows (a ChunkedReq)."""
        remain = len(pending.input_ids) - cached_len
        chunk = min(self.token_budget, remain)
        cls = ChunkedReq if chunk < remain else Req
        end = cached_len + chunk
        self.token_budget -= chunk
        self.reserved += self.cache.slots_to_grow(cached_len, pending.slots_needed)
        self._write_ids(row, pending.input_ids, cached_len, end)
        req = cls(pending.input_ids[:end], row, cached_len, pending.output_len, pending.uid,
                  pending.sampling_params, cache_handle=handle)
        req.prompt_len = pending.prompt_len  # a retracted request's output starts at its prompt's end (chapter 23)
        req.lora_id, req.lora_slot = lora  # chapter 31
        self.reqs.append(req)
        return req

    def try_add_one(self, pending: PendingReq) -> Req | None:
        """Add the next piece of `pending` to this batch, or return None (changing nothing)."""
        if self.token_budget <= 0:
            return None
        if (chunked := pending.chunked_req) is not None:
            return self._add_one_req(pending, chunked.cache_handle, chunked.table_idx, chunked.cached_len,
                                     (chunked.lora_id, chunked.lora_slot))
        admitted = self._try_allocate_one(pending)
        if admitted is None:
            return None
        handle, row, lora = admitted
        return self._add_one_req(pending, handle, row, handle.cached_len, lora)


class PrefillManager:
    def __init__(self, table: TableManager, cache: CacheManager, max_extend_tokens: int,
                 lora: LoraManager | None = None,
                 live_loras: Callable[[], frozenset[str | None]] = frozenset) -> None:
        self.table = table
        self.cache = cache
        self.max_extend_tokens = max_extend_tokens
        self.lora = lora  # chapter 31: the adapters' slots, and the adapters the admitted requests use
        self.live_loras = live_loras
        self.pending: deque[PendingReq] = deque()
        self.prompt_tokens = 0  # chapter 27: prompt tokens of the requests admitted (again after a retraction)
        self.cached_tokens = 0  # chapter 27: of those, the ones the prefix cache already held

    def add(self, pending: PendingReq) -> None:
        self.pending.append(pending)

    def schedule_next_batch(self, reserved: int, decode_rows: int = 0) -> Batch | None:
        """A prefill batch of waiting requests in arrival order, or None if the first one cannot start yet.
        A request cut short by the budget goes back to the front: its next chunk runs first next time.

        decode_rows (chapter 21): running requests that will decode in the same forward pass. Each computes one
        token, so each takes one token of the budget; None when they leave nothing for prompt tokens."""
        budget = self.max_extend_tokens - decode_rows
        if budget <= 0:
            return None
        adder = PrefillAdder(budget, self.table, self.cache, reserved, self.lora,
                             self.live_loras() if self.lora is not None else frozenset())
        unfinished: list[PendingReq] = []
        # No overtaking: stop at the first request that does not fit, so a long request cannot starve.
        while self.pending and (req := adder.try_add_one(self.pending[0])) is not None:
            pending = self.pending.popleft()
            if pending.chunked_req is None:  # admitted now, not a later chunk: its prefix match is req.cached_len
                self.prompt_tokens += len(pending.input_ids)
                self.cached_tokens += req.cached_len
            pending.chunked_req = req if isinstance(req, ChunkedReq) else None
            if pending.chunked_req is not None:
                unfinished.append(pending)
        self.pending.extendleft(reversed(unfinished))
        return Batch(adder.reqs, "prefill") if adder.reqs else None

    def status(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens}

    def requeue(self, pending: PendingReq) -> None:
        """A retracted request (chapter 23) waits at the front: behind a prompt part-way through its chunks only,
        which holds a row and pages and must go on first."""
        at = 1 if self.pending and self.pending[0].chunked_req is not None else 0
        self.pending.insert(at, pending)

    def abort(self, uid: int) -> PendingReq | None:
        """Take a waiting request out of the queue (its chunked_req, if any, still holds a row and pages)."""
        for pending in self.pending:
            if pending.uid == uid:
                self.pending.remove(pending)
                return pending
        return None
