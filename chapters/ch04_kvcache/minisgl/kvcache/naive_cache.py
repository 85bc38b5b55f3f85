"""NaiveCacheManager: hands out free KV slots and takes them back. No sharing between requests yet.

The slot allocator of chapters 4 to 7. Chapter 8's scheduler replaces it with the page-granular
CacheManager (scheduler/cache.py), and chapter 9 adds a radix tree that shares prefixes; from then on only
chapter 6's teaching ManualBatcher (teaching/manual.py) still uses this one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from minisgl.core import Req


class NaiveCacheManager:
    def __init__(self, num_slots: int, device: str | torch.device = "cpu") -> None:
        self.num_slots = num_slots
        self.device = torch.device(device)
        # A stack of free slot ids (popping from the end: O(n) in the slots taken) and a flag per slot, so
        # that a double free is caught in O(n) in the slots freed, whatever the pool size.
        self._free: list[int] = list(range(num_slots - 1, -1, -1))
        self._is_free = [True] * num_slots

    @property
    def available_size(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> torch.Tensor:
        """Take n free slots (int32 tensor); raise MemoryError, changing nothing, if fewer are free."""
        # TODO(ch04): check there are n free slots (MemoryError naming both numbers otherwise, state untouched),
        # then pop them, clear their _is_free flags, and return them as an int32 tensor on self.device.
        raise NotImplementedError("TODO(ch04): NaiveCacheManager.allocate")

    def allocate_rows(self, reqs: list[Req], page_table: torch.Tensor) -> None:
        """A slot for every new token (positions cached_len..device_len-1) of each request, written into its
        page-table row. One allocation for all of them: all or nothing."""
        slots = self.allocate(sum(r.extend_len for r in reqs))
        start = 0
        for req in reqs:
            page_table[req.table_idx, req.cached_len : req.device_len] = slots[start : start + req.extend_len]
            start += req.extend_len

    def release_rows(self, reqs: list[Req], ends: list[int], page_table: torch.Tensor) -> None:
        """Undo allocate_rows for requests whose forward pass never finished: the slots of positions
        cached_len..end-1 go back (end: each request's device_len when its slots were allocated)."""
        for req, end in zip(reqs, ends):
            if req.cached_len < end:
                self.free(page_table[req.table_idx, req.cached_len : end])

    def free(self, slots: torch.Tensor) -> None:
        """Give slots back. Freeing a slot that is already free is a bug and raises ValueError."""
        # TODO(ch04): reject slots out of range, already free (their _is_free flag) or repeated (ValueError,
        # nothing freed); then set their flags and push them back on the free stack.
        raise NotImplementedError("TODO(ch04): NaiveCacheManager.free")

    def check_integrity(self) -> None:
        """Every slot is free exactly once (call when no request holds slots)."""
        if sorted(self._free) != list(range(self.num_slots)) or not all(self._is_free):
            leaked = self.num_slots - len(set(self._free))
            raise AssertionError(f"KV slots leaked or double-freed: {leaked} of {self.num_slots} not free")
