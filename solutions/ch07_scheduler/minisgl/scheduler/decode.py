"""DecodeManager: the requests that have their first token and now decode one token per step."""

from __future__ import annotations

from minisgl.core import Batch, Req


class DecodeManager:
    def __init__(self) -> None:
        self.running: list[Req] = []

    def add(self, reqs: list[Req]) -> None:
        self.running.extend(reqs)

    def remove(self, req: Req) -> None:
        self.running.remove(req)

    def reserved_slots(self) -> int:
        """KV slots the running requests will still allocate: one per remaining decode step each."""
        # TODO(ch07): every running request still needs one slot per token it may generate.
        # >>> solution
        return sum(r.remain_len for r in self.running)
        # <<< solution

    def schedule_next_batch(self) -> Batch | None:
        return Batch(list(self.running), "decode") if self.running else None
