"""DecodeManager: the requests that have their first token and now decode one token per step."""

from __future__ import annotations

import math
from collections.abc import Collection

from minisgl.core import Batch, Req
from minisgl.scheduler.cache import slots_to_grow


class DecodeManager:
    def __init__(self, page_size: int = 1) -> None:
        self.page_size = page_size
        self.running: list[Req] = []  # in admission order

    def add(self, reqs: list[Req]) -> None:
        self.running.extend(reqs)

    def remove(self, req: Req) -> None:
        self.running.remove(req)

    def reserved_slots(self, ratio: float = 1.0, pinned: Collection[int] = ()) -> int:
        """KV slots the running requests will still allocate, in whole pages. A running request writes KV up to
        position max_device_len - 2 (its last token is never fed back). With ratio 1 (conservative admission)
        each one reserves all of that; with ratio < 1 (optimistic admission, chapter 23) a request reserves only
        a share `ratio` of the positions it may still write, rounded up, except the pinned ones (their uid is in
        `pinned`), which keep their whole reservation."""
        ps = self.page_size
        if ratio >= 1.0:
            return sum(slots_to_grow(r.cached_len, r.max_device_len - 1, ps) for r in self.running)
        # TODO(ch23): per request, the positions it may still write are max_device_len - 1 - cached_len (never
        # fewer than 0); expect ceil(ratio x that) of them (less 1e-9 before rounding up: a ratio of 0.3 that
        # came out of float arithmetic can be 0.30000000000000004, and 0.30000000000000004 x 20 is
        # 6.000000000000001), or all of them for a pinned request; reserve the whole pages from
        # cached_len to cached_len + what is expected.
        # >>> solution
        total = 0
        for r in self.running:
            remaining = max(r.max_device_len - 1 - r.cached_len, 0)
            expected = remaining if r.uid in pinned else math.ceil(ratio * remaining - 1e-9)
            total += slots_to_grow(r.cached_len, r.cached_len + expected, ps)
        return total
        # <<< solution

    def schedule_next_batch(self) -> Batch | None:
        """Every running request that may still generate. With overlap scheduling the set can hold requests
        whose last token is on the device but not yet processed: they are done and must not run again."""
        reqs = [r for r in self.running if r.can_decode]
        return Batch(reqs, "decode") if reqs else None
