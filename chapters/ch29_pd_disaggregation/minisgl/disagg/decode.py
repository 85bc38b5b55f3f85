"""DecodeScheduler: the decode engine's scheduler. Its requests never prefill here: each waits for its KV from the
prefill engine, then decodes like any running request.

A request arrives (with its bootstrap room) and waits. The channel's transfers are taken in order: for transfer k
of room r, the request of room r is admitted (a row, pages for its prompt, room reserved for everything it will
write, as admission does), the KV is received into its pages, and the request starts with the prompt cached and the
prefill engine's first token as its first output token. A transfer whose request has not arrived yet, or does not
fit yet, waits at the head of the channel (the order is the channel's). A request aborted here while it waits still
has its KV received, into nothing (the prefill side frees its pages once it hears of it); a request the prefill
side aborted ends here with finish reason "abort"."""

from __future__ import annotations

import torch

from minisgl.core import Req
from minisgl.disagg.channel import KVChannel
from minisgl.disagg.kv import kv_shape, unpack_kv
from minisgl.engine.engine import Engine
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.scheduler import Scheduler
from minisgl.scheduler.utils import PendingReq

def check_disaggregated(pending: PendingReq) -> None:
    """ValueError for what a prefill/decode pair cannot serve: the first token's log-probabilities and a grammar's
    state live on the prefill side, and this course does not carry them over."""
    params = pending.sampling_params
    if params.logprobs or params.grammar is not None:
        raise ValueError("logprobs and grammars are not supported with disaggregation (the first token is sampled "
                         "on the prefill side)")


WAIT_S = 0.02  # how long an otherwise idle decode side waits for the next transfer's description in one call


class DecodeScheduler(Scheduler):
    def __init__(self, engine: Engine, config: SchedulerConfig | None, channel: KVChannel) -> None:
        super().__init__(engine, config)
        self.channel = channel
        self.waiting: dict[int, PendingReq] = {}  # bootstrap room -> the request waiting for its KV
        self.rooms: dict[int, int] = {}  # uid -> room, while it waits
        self.dropped: set[int] = set()  # rooms aborted here whose KV is still to come
        self.next_k = 0  # the next transfer to take
        self.transfers = 0  # transfers received (for the status)

    def check_request(self, pending: PendingReq) -> None:
        super().check_request(pending)
        check_disaggregated(pending)

    def add_request(self, pending: PendingReq, room: int) -> None:
        """Queue a request whose prefill runs on the prefill engine under bootstrap room `room`. A request refused
        here may still have been accepted there: its KV, if it comes, is dropped (the channel must not stall on it)."""
        if room in self.waiting:
            raise ValueError(f"bootstrap room {room} is already waiting for its KV")
        try:
            self.check_request(pending)
        except ValueError:
            self.dropped.add(room)
            raise
        self.waiting[room] = pending
        self.rooms[pending.uid] = room

    @property
    def idle(self) -> bool:
        return super().idle and not self.waiting

    def schedule_next_batch(self):
        self.receive()
        return super().schedule_next_batch()

    def receive(self) -> None:
        """Take every transfer the prefill side has posted, in order, while its request is here and fits."""
        self.channel.beat()
        # With nothing to decode, wait a little for the next transfer rather than spin (a server loop turns here)
        wait_s = WAIT_S if self.waiting and not self.decode_manager.running else 0.0
        while (meta := self.channel.meta(self.next_k, wait_s)) is not None:
            wait_s = 0.0
            room = meta["room"]
            if "aborted" in meta:  # nothing follows on the channel for it
                self._end_waiting(room)
                self.channel.confirm()  # transfer k is taken: the count stays the number of the next one
            elif room in self.dropped:  # aborted here: take the KV off the channel and drop it
                self.channel.recv(kv_shape(self.engine.kv_cache, meta["len"]), self.engine.kv_cache.k_cache(0).dtype)
                self.dropped.discard(room)
                self.channel.confirm()
            else:
                pending = self.waiting.get(room)
                if pending is None:
                    return  # its request has not reached this engine yet
                req = self.admit(pending)
                if req is None:
                    return  # no room yet: running requests free pages as they finish
                del self.waiting[room], self.rooms[req.uid]
                self._take(req, meta)
            self.next_k += 1

    def admit(self, pending: PendingReq) -> Req | None:
        """A row and the pages of the prompt's positions for a request whose KV is about to arrive, or None (nothing
        changed) if it does not fit: a free row, and room for everything it will ever write on top of what the
        running requests may still write. The Req starts with nothing cached (cached_len 0, device_len the prompt's
        length), its prompt's ids in its token-pool row, and it is live (it holds a row)."""
        table, cache = self.table_manager, self.cache_manager
        # TODO(ch29): None if no row is free, or if decode_manager.reserved_slots() plus the whole pages of
        # pending.slots_needed exceed cache.available_size. Otherwise take a row, make the Req (cached_len 0,
        # output_len pending.output_len), allocate_paged its pages, write its prompt into its token-pool row and
        # record it in self._live.
        raise NotImplementedError("TODO(ch29): DecodeScheduler.admit")

    def _take(self, req: Req, meta: dict) -> None:
        """Receive the request's KV into its pages, confirm, and start it with the prefill side's first token."""
        n = meta["len"]
        if n != req.prompt_len:
            raise RuntimeError(f"transfer {self.next_k}: {n} tokens of KV for a prompt of {req.prompt_len}")
        kv = self.channel.recv(kv_shape(self.engine.kv_cache, n), self.engine.kv_cache.k_cache(0).dtype)
        slots = self.cache_manager.host_table[req.table_idx, :n].to(self.engine.device)
        unpack_kv(self.engine.kv_cache, slots, kv)
        self.channel.confirm()
        self.transfers += 1
        token = meta["token"]
        req.complete_one()  # the prompt is cached; the first token is the next input
        self.table_manager.token_pool[req.table_idx, req.device_len - 1] = token
        reason = self._record(req, token, {})
        if reason is not None:
            self._finish(req, reason)
        else:
            self.decode_manager.add([req])

    def _end_waiting(self, room: int) -> None:
        """The prefill side gave the request up: it ends here with finish reason "abort" (if it is here)."""
        self.dropped.discard(room)
        pending = self.waiting.pop(room, None)
        if pending is None:
            return
        del self.rooms[pending.uid]
        req = Req(pending.input_ids, -1, 0, pending.output_len, pending.uid, pending.sampling_params)
        req.finish_reason = "abort"
        self.finished[req.uid] = req
        self._released(pending, "aborted")

    def _abort(self, uid: int) -> bool:
        room = self.rooms.pop(uid, None)
        if room is None:
            return super()._abort(uid)
        pending = self.waiting.pop(room)
        self.dropped.add(room)  # its KV still comes: received and dropped, so the prefill side frees its pages
        self._released(pending, "aborted")
        return True

    def abort_all(self) -> None:
        self.dropped |= set(self.waiting)
        self.waiting.clear()
        self.rooms.clear()
        super().abort_all()

    def status(self) -> dict[str, int]:
        return super().status() | {"transfers_waiting": len(self.waiting), "transfers_received": self.transfers}
