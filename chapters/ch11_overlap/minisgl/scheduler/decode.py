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
        return sum(slots_to_grow(r.cached_len, r.max_device_len - 1, self.page_size) for r in self.running)

    def schedule_next_batch(self) -> Batch | None:
        """Every running request that may still generate. With overlap scheduling the set can hold requests
        whose last token is on the device but not yet processed: they are done and must not run again."""
        # TODO(ch11): a batch of the running requests that can still decode (None if there is none).
        raise NotImplementedError("TODO(ch11): DecodeManager.schedule_next_batch")
