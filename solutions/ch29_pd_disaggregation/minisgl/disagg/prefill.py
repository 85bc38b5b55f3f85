"""PrefillScheduler: the prefill engine's scheduler. It runs each request's prompt and samples its first token, as any
scheduler does, and then, instead of decoding, hands the request over: its KV goes to the decode engine.

A request that finished its prefill is parked: it keeps its row and its pages (they still count as held by a live
request) until the decode side confirms that the KV is in place, then they are freed as a finished request's are
(its whole pages go to the prefix cache). Zero-copy transfer engines (Mooncake, NIXL) read the pages themselves, so
they must stay put until the transfer is done; send/recv sends a packed copy, but holding the pages the same way
keeps the KV in flight bounded by this engine's pool. A request aborted here before its prefill ends is announced to
the decode side (nothing follows for it on the channel). A decode side that stops beating frees every parked
request at once, and later requests are announced as aborted instead of sent."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from minisgl.core import Req
from minisgl.disagg.channel import KVChannel
from minisgl.disagg.decode import check_disaggregated
from minisgl.disagg.kv import pack_kv
from minisgl.engine.engine import Engine
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.scheduler import Scheduler
from minisgl.scheduler.utils import PendingReq


@dataclass
class Parked:
    """A request whose KV is on its way: held until the decode side confirms transfer k."""

    req: Req
    work: object  # the send in flight (its buffer lives with it)
    buffer: torch.Tensor


class PrefillScheduler(Scheduler):
    def __init__(self, engine: Engine, config: SchedulerConfig | None, channel: KVChannel) -> None:
        super().__init__(engine, config)
        if self.speculation is not None:
            raise ValueError("speculative decoding runs on the decode side: not with disaggregation mode prefill")
        self.channel = channel
        self.rooms: dict[int, int] = {}  # uid -> bootstrap room, until its KV is sent (or it is aborted)
        self.parked: dict[int, Parked] = {}  # transfer k -> the request whose pages it holds
        self.next_k = 0  # the next transfer's number
        self.peer_alive = True
        self._sending: Req | None = None

    def add_request(self, pending: PendingReq, room: int) -> None:
        """Queue a request for its prefill alone: one token (its first), then its KV goes to the decode side."""
        try:
            check_disaggregated(pending)
            params = replace(pending.sampling_params, max_tokens=1,
                             min_tokens=min(pending.sampling_params.min_tokens, 1))
            super().add_request(replace(pending, sampling_params=params))
        except ValueError:
            self._post({"room": room, "aborted": "refused by the prefill side"})  # the decode side stops waiting
            raise
        self.rooms[pending.uid] = room

    def schedule_next_batch(self):
        self.poll()
        return super().schedule_next_batch()

    def poll(self) -> None:
        """Free what the decode side confirmed; free everything parked if the decode side is gone."""
        if not self.parked:
            return
        if self.peer_alive and not self.channel.peer_alive():
            self.peer_alive = False
        if not self.peer_alive:
            self.release_confirmed(self.next_k)  # nobody will confirm them: let go of them all
            return
        self.release_confirmed(self.channel.received())

    def release_confirmed(self, received: int) -> None:
        """The decode side confirmed transfers 0 .. received-1: free the pages and row of each one still parked,
        once, as a finished request's (Scheduler._free)."""
        # TODO(ch29): for each parked transfer k below `received` (self.parked maps k -> Parked), take it out of
        # self.parked and free its request with Scheduler._free (not self._free: that would park it again).
        # >>> solution
        for k in [k for k in self.parked if k < received]:
            Scheduler._free(self, self.parked.pop(k).req)
        # <<< solution

    def _finish(self, req: Req, reason: str) -> None:
        self._sending = req if req.uid in self.rooms else None
        try:
            super()._finish(req, reason)
        finally:
            self._sending = None

    def _free(self, req: Req) -> None:
        if req is self._sending:  # its prefill is done: send the KV, keep the pages until it is confirmed
            self._send(req, self.rooms.pop(req.uid))
            return
        for k, parked in list(self.parked.items()):  # abort_all: a parked request goes too
            if parked.req is req:
                del self.parked[k]
        super()._free(req)

    def _released(self, req, reason: str) -> None:
        room = self.rooms.pop(req.uid, None) if reason == "aborted" else None
        if room is not None:  # aborted before its KV was sent: the decode side stops waiting for it
            self._post({"room": room, "aborted": "aborted on the prefill side"})
        super()._released(req, reason)

    def _post(self, meta: dict) -> int:
        k, self.next_k = self.next_k, self.next_k + 1
        self.channel.post(k, meta)
        return k

    def _send(self, req: Req, room: int) -> None:
        if not self.peer_alive:  # nobody to send to: announce it, and let go of the pages at once
            self._post({"room": room, "aborted": "the decode side stopped answering"})
            Scheduler._free(self, req)
            return
        n = req.prompt_len
        slots = self.cache_manager.host_table[req.table_idx, :n].to(self.engine.device)
        kv = pack_kv(self.engine.kv_cache, slots)
        k = self._post({"room": room, "len": n, "token": int(req.input_ids[n])})
        try:
            work = self.channel.send(kv)
        except RuntimeError:  # the decode side is gone (its connection closed)
            self.peer_alive, work = False, None
        self.parked[k] = Parked(req, work, kv)  # it keeps its row and pages until transfer k is confirmed

    def abort_all(self) -> None:
        """Scheduler.abort_all, and the decode side told of every request whose KV will never come."""
        for room in self.rooms.values():
            self._post({"room": room, "aborted": "aborted on the prefill side"})
        self.rooms.clear()
        super().abort_all()  # frees parked requests too (they are live)
        self.parked.clear()

    def status(self) -> dict[str, int]:
        return super().status() | {"transfers_parked": len(self.parked), "decode_alive": int(self.peer_alive)}
