"""CacheManager: the KV pool handed out in pages, and given back when requests finish.

A page is `page_size` consecutive slots. A request's positions fill its pages in order: positions
[k * page_size, (k + 1) * page_size) of a request live in one page, so the page table row of a request
is a run of whole pages. With page_size 1 this is chapter 4's slot allocator; larger pages are what GPU
attention kernels and the prefix cache of chapter 9 work with.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from minisgl.core import Req


def div_ceil(a: int, b: int) -> int:
    return -(-a // b)


def slots_to_grow(from_len: int, to_len: int, page_size: int) -> int:
    """Slots a request must still take to hold positions [0, to_len) when it holds [0, from_len) (whole pages)."""
    return max(div_ceil(to_len, page_size) - div_ceil(from_len, page_size), 0) * page_size


class CacheManager:
    def __init__(self, num_pages: int, page_size: int, page_table: torch.Tensor) -> None:
        if page_table.shape[1] % page_size:
            raise ValueError(f"page table width {page_table.shape[1]} is not a multiple of page_size {page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.page_table = page_table
        self.device = page_table.device
        # The host's copy of the page table (the table itself on a CPU). Every slot the cache manager maps goes
        # into both, and it reads only this one: reading the device's table back, to free a request's pages,
        # would make the CPU wait for every batch queued on the GPU, which overlap scheduling (chapter 11) must
        # never do. Chapter 22 measured one such wait per finished request.
        self.host_table = page_table if self.device.type == "cpu" else page_table.cpu()
        # A stack of free page ids, and a flag per page so that a double free is caught when it happens.
        self._free_pages: list[int] = list(range(num_pages - 1, -1, -1))
        self._is_free = [True] * num_pages

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    @property
    def available_size(self) -> int:
        """Slots that can still be handed out."""
        return len(self._free_pages) * self.page_size

    def slots_to_grow(self, from_len: int, to_len: int) -> int:
        return slots_to_grow(from_len, to_len, self.page_size)

    def _allocate(self, n: int) -> list[int]:
        """Take n free pages, or raise MemoryError and change nothing."""
        if n > len(self._free_pages):
            raise MemoryError(f"KV cache full: {n} pages requested, {len(self._free_pages)} free")
        pages = [self._free_pages.pop() for _ in range(n)]
        for p in pages:
            self._is_free[p] = False
        return pages

    def _page_slots(self, pages: Sequence[int]) -> torch.Tensor:
        """The slots of these pages, page after page: page p holds slots p*page_size .. p*page_size+page_size-1."""
        offsets = torch.arange(self.page_size, dtype=torch.int32)
        return (torch.tensor(pages, dtype=torch.int32)[:, None] * self.page_size + offsets).flatten()

    def allocate_paged(self, reqs: Sequence[Req]) -> None:
        """Give every request the pages its next forward pass writes into, recorded in its page-table row.

        A request holds pages for positions [0, cached_len) rounded up to whole pages; it needs pages up to
        device_len rounded up. One allocation for all requests: all or nothing (MemoryError).
        """
        # TODO(ch08): for each request, the pages it lacks run from page div_ceil(cached_len) to page
        # div_ceil(device_len) (in page units). Allocate all of them at once with _allocate, turn them into
        # slots with _page_slots, and write each request's slots into [table_idx, first*ps : last*ps] of
        # host_table, then of page_table unless they are the same tensor, with one indexed assignment each (rows
        # and columns built on the CPU, moved to the table's device for the second).
        # >>> solution
        ps = self.page_size
        # Only the requests that lack a page (in a decode step with large pages, a few of the batch): the rest
        # cost no tensor operation, since this runs at every step.
        spans = [(r.table_idx, first, last) for r in reqs
                 if (first := div_ceil(r.cached_len, ps)) < (last := div_ceil(r.device_len, ps))]
        if not spans:
            return
        slots = self._page_slots(self._allocate(sum(last - first for _, first, last in spans)))
        # Span i writes columns first_i*ps .. last_i*ps-1 of row_i: the same few array ops for any batch. In numpy:
        # torch's repeat_interleave on the CPU hands its work to every intra-op thread, a wake-up that now and then
        # held a whole step for 15 ms (chapter 22 measured it).
        rows, firsts, lasts = np.array(spans).T
        counts = (lasts - firsts) * ps
        cols = np.arange(len(slots)) + np.repeat(firsts * ps - (np.cumsum(counts) - counts), counts)
        rows, cols = torch.from_numpy(np.repeat(rows, counts)), torch.from_numpy(cols)
        self.host_table[rows, cols] = slots
        if self.host_table is not self.page_table:
            # non_blocking: the CPU need not wait for the GPU to drain its queue (see make_metadata, chapter 5)
            index = (rows.to(self.device, non_blocking=True), cols.to(self.device, non_blocking=True))
            self.page_table[index] = slots.to(self.device, non_blocking=True)
        # <<< solution

    def map_slots(self, row: int, start: int, slots: torch.Tensor) -> None:
        """Point positions start, start+1, ... of a page-table row at `slots` (a CPU tensor), in both copies."""
        self.host_table[row, start : start + len(slots)] = slots
        if self.host_table is not self.page_table:
            self.page_table[row, start : start + len(slots)] = slots.to(self.device, non_blocking=True)

    def release_paged(self, reqs: Sequence[Req], ends: Sequence[int]) -> None:
        """Undo allocate_paged for requests whose forward pass never finished: the pages of positions
        cached_len..end-1 (end: each request's device_len when its pages were allocated) go back."""
        ps = self.page_size
        for req, end in zip(reqs, ends):
            first, last = div_ceil(req.cached_len, ps) * ps, div_ceil(end, ps) * ps
            if first < last:
                self.free(self.host_table[req.table_idx, first:last])

    def free(self, slots: torch.Tensor) -> None:
        """Give back the pages of `slots`: a run of whole pages as a page-table row holds them, so the run starts
        at a page's first slot; a shorter last page is the request's partly filled page. ValueError, and nothing
        freed, on a slot that does not start a page where it should, or on a page that is already free."""
        # TODO(ch08): every page_size-th slot of the run (from the first) must start a page (slot % page_size
        # == 0); its page id is slot // page_size. Reject a misaligned run, a page out of range, a page that
        # is already free or a repeated page (ValueError, nothing freed); then mark them free and push them.
        # >>> solution
        ps = self.page_size
        firsts = slots.flatten()[::ps].tolist()
        if any(s % ps for s in firsts):
            raise ValueError(f"slots {firsts} do not start pages of {ps} slots")
        pages = [s // ps for s in firsts]
        bad = [p for p in pages if not 0 <= p < self.num_pages or self._is_free[p]]
        if bad or len(set(pages)) != len(pages):
            raise ValueError(f"double free or invalid KV pages: {sorted(set(bad)) or pages}")
        for p in pages:
            self._is_free[p] = True
        self._free_pages.extend(pages)
        # <<< solution

    def cache_req(self, req: Req, finished: bool) -> None:
        """What happens to a request's pages after a forward pass. Without sharing (this chapter) a finished
        request gives back every page it holds and a running one keeps them; chapter 9 shares them instead."""
        if finished:
            end = div_ceil(req.cached_len, self.page_size) * self.page_size
            self.free(self.host_table[req.table_idx, :end])

    def check_integrity(self) -> None:
        """Call when no request holds pages: every page is free exactly once (AssertionError naming the fault)."""
        # TODO(ch08): a page id on the free stack twice is a double free; fewer free pages than num_pages is a
        # leak; a flag in _is_free that disagrees with the stack is corrupted bookkeeping. Raise AssertionError.
        # >>> solution
        free = self._free_pages
        if len(set(free)) != len(free):
            raise AssertionError(f"KV pages double-freed: {len(free) - len(set(free))} duplicates on the free list")
        if len(free) != self.num_pages:
            raise AssertionError(f"KV pages leaked: {self.num_pages - len(free)} of {self.num_pages} not free")
        if not all(self._is_free):
            raise AssertionError("KV page flags disagree with the free list")
        # <<< solution
