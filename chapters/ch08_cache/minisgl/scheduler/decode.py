"""DecodeManager: the requests that have their first token and now decode one token per step."""

from __future__ import annotations

from minisgl.core import Batch, Req
from minisgl.scheduler.cache import slots_to_grow


class DecodeManager:
    def __init__(self, page_size: int = 1) -> None:
        self.page_size = page_size
        self.running: list[Req] = []

    def add(self, reqs: list[Req]) -> None:
        self.running.extend(reqs)

    def remove(self, req: Req) -> None:
        self.running.remove(req)

    def reserved_slots(self) -> int:
        """KV slots the running requests will still allocate, in whole pages."""
        # TODO(ch08): a running request holds the pages of positions [0, cached_len); it will write KV up to
        # position max_device_len - 2 (its last token is never fed back). Sum slots_to_grow over the requests.
        raise NotImplementedError("TODO(ch08): DecodeManager.reserved_slots")

    def schedule_next_batch(self) -> Batch | None:
        return Batch(list(self.running), "decode") if self.running else None
