"""CacheManager: the KV pool handed out in pages, and given back when requests finish.

A page is `page_size` consecutive slots. A request's positions fill its pages in order: positions
[k * page_size, (k + 1) * page_size) of a request live in one page, so the page table row of a request
is a run of whole pages. With page_size 1 this is chapter 4's slot allocator; larger pages are what GPU
attention kernels work with.

Pages are free, held by a running request, or held by the prefix cache (chapter 9). A request that starts
with a cached prefix reads the cache's pages (locked while it runs); when it finishes, its own pages go to
the cache instead of the free list, and the cache gives pages back (eviction) when the free list runs short.

Chapter 28 puts a host tier under the prefix cache (scheduler/hicache.py attaches it): a match may end in KV that
is on the host only (match_tiers), whose device pages the scheduler allocates (allocate_slots) before loading it
back; the integrity check then covers the host pool and the locks of copies in flight too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from minisgl.core import Req
from minisgl.kvcache import create_prefix_cache
from minisgl.kvcache.prefix_cache import CacheHandle
from minisgl.lora.prefix import prefix_key


def div_ceil(a: int, b: int) -> int:
    return -(-a // b)


def slots_to_grow(from_len: int, to_len: int, page_size: int) -> int:
    """Slots a request must still take to hold positions [0, to_len) when it holds [0, from_len) (whole pages)."""
    return max(div_ceil(to_len, page_size) - div_ceil(from_len, page_size), 0) * page_size


class CacheManager:
    def __init__(self, num_pages: int, page_size: int, page_table: torch.Tensor, cache_type: str = "radix") -> None:
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
        self.prefix_cache = create_prefix_cache(cache_type, page_size, "cpu")  # its slots live with host_table
        # A stack of free page ids, and a flag per page so that a double free is caught when it happens.
        self._free_pages: list[int] = list(range(num_pages - 1, -1, -1))
        self._is_free = [True] * num_pages
        self.hicache = None  # chapter 28: the host tier's controller (HiCacheManager), when it is on

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    @property
    def available_size(self) -> int:
        """Slots that can still be handed out: free pages, and cached pages no running request uses."""
        return len(self._free_pages) * self.page_size + self.prefix_cache.evictable_size

    def slots_to_grow(self, from_len: int, to_len: int) -> int:
        return slots_to_grow(from_len, to_len, self.page_size)

    def slots_for(self, reqs: Sequence[Req]) -> int:
        """Slots allocate_paged(reqs) would take now: the new pages of every request's next forward pass."""
        return sum(self.slots_to_grow(r.cached_len, r.device_len) for r in reqs)

    def _allocate(self, n: int) -> list[int]:
        """Take n free pages, evicting cached prefixes if the free list is short; MemoryError and no change if
        even that is not enough."""
        if n * self.page_size > self.available_size:
            raise MemoryError(f"KV cache full: {n} pages requested, {self.available_size // self.page_size} available")
        if n > len(self._free_pages):
            self.free(self.prefix_cache.evict((n - len(self._free_pages)) * self.page_size))
        pages = [self._free_pages.pop() for _ in range(n)]
        for p in pages:
            self._is_free[p] = False
        return pages

    def allocate_slots(self, num_slots: int) -> torch.Tensor:
        """Chapter 28: the slots of num_slots / page_size pages taken now (evicting if needed), for KV that is loaded
        into them rather than computed; MemoryError and no change if they are not there."""
        return self._page_slots(self._allocate(num_slots // self.page_size))

    def _page_slots(self, pages: Sequence[int]) -> torch.Tensor:
        """The slots of these pages, page after page: page p holds slots p*page_size .. p*page_size+page_size-1."""
        offsets = torch.arange(self.page_size, dtype=torch.int32)
        return (torch.tensor(pages, dtype=torch.int32)[:, None] * self.page_size + offsets).flatten()

    def allocate_paged(self, reqs: Sequence[Req]) -> None:
        """Give every request the pages its next forward pass writes into, recorded in its page-table row.

        A request holds pages for positions [0, cached_len) rounded up to whole pages; it needs pages up to
        device_len rounded up. One allocation for all requests: all or nothing (MemoryError).
        """
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

    def free_rejected(self, req: Req, end: int) -> None:
        """Chapter 26: after a verify step, give back the pages that only rejected drafts used. The request's pages
        were allocated for positions up to `end` (its device_len in the step: the last token and every draft); its
        cached_len now stops after the kept drafts. It keeps the pages of positions [0, cached_len), whole, as every
        live request does; a page holding a kept position and rejected ones stays (its rejected slots are written
        over later)."""
        ps = self.page_size
        first, last = div_ceil(req.cached_len, ps) * ps, div_ceil(end, ps) * ps
        if first < last:
            self.free(self.host_table[req.table_idx, first:last])

    def free(self, slots: torch.Tensor) -> None:
        """Give back the pages of `slots`: a run of whole pages as a page-table row holds them, so the run starts
        at a page's first slot; a shorter last page is the request's partly filled page. ValueError, and nothing
        freed, on a slot that does not start a page where it should, or on a page that is already free."""
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

    def match_req(self, ids: list[int]) -> tuple[CacheHandle, torch.Tensor]:
        """The longest cached prefix of a prompt, leaving at least its last token to compute (the forward pass
        that computes it gives the first output token): its handle and the KV slots of its tokens."""
        return self.prefix_cache.match_prefix(ids[: len(ids) - 1])

    def match_tiers(self, ids: list[int]) -> tuple[CacheHandle, torch.Tensor, CacheHandle | None]:
        """match_req across the tiers (chapter 28): the device part's handle and slots, and a handle to the end of a
        host-only part after it (None without a host tier, or when the match ends on the device)."""
        if self.hicache is None:
            return *self.match_req(ids), None
        return self.prefix_cache.match_tiers(ids[: len(ids) - 1])

    def lock(self, handle: CacheHandle) -> None:
        self.prefix_cache.lock_handle(handle)

    def unlock(self, handle: CacheHandle) -> None:
        self.prefix_cache.lock_handle(handle, unlock=True)

    def cache_req(self, req: Req, finished: bool) -> None:
        """Hand the request's computed pages to the prefix cache: after its prefill (it keeps running on them)
        and when it finishes (it lets go of everything).

        Positions of the request, with `old` its locked handle and `new` the handle after inserting:
          [0, old)            the prefix it matched at admission: the cache's pages
          [old, existed)      pages it computed that another request cached meanwhile: duplicates, freed
          [existed, new)      pages it computed that the cache now owns
          [new, cached_len)   the partly filled last page, which the cache does not take: freed when finished
        """
        ps = self.page_size
        row = self.host_table[req.table_idx]
        known = min(req.cached_len, len(req.input_ids))  # a request aborted in flight: KV of ids the host lacks
        whole = known - known % ps
        old = req.cache_handle or CacheHandle(0)
        key = prefix_key(req.input_ids[:whole].tolist(), req.lora_id)  # chapter 31: KV is per adapter
        existed, new = self.prefix_cache.insert_prefix(key, row[:whole])
        self.unlock(old)
        self.free(row[old.cached_len : existed])
        if finished:
            self.free(row[new.cached_len : div_ceil(req.cached_len, ps) * ps])
            req.cache_handle = None
        else:
            self.map_slots(req.table_idx, old.cached_len, self.prefix_cache.slots(new)[old.cached_len : existed])
            req.cache_handle = new
            self.lock(new)

    def held_pages(self, reqs: Sequence[Req], in_flight: Mapping[int, int] | None = None) -> list[int]:
        """The KV pages live requests hold outside the prefix cache, in page ids (chapter 23). A live request's row
        covers positions [0, cached_len) in whole pages: the first handle.cached_len positions (whole pages) point
        at its locked prefix in the cache, the pages after them are its own. `in_flight` (chapter 26): uid -> end
        for the requests of a verify step not processed yet, whose rows cover [0, end) until then (their drafts')."""
        ps = self.page_size
        pages: list[int] = []
        for r in reqs:
            start = r.cache_handle.cached_len if r.cache_handle is not None else 0
            end = div_ceil(max(r.cached_len, in_flight.get(r.uid, 0) if in_flight else 0), ps) * ps
            pages += [s // ps for s in self.host_table[r.table_idx, start:end:ps].tolist()]
        return pages

    def check_integrity(self, held: Sequence[Req] = (), in_flight: Mapping[int, int] | None = None) -> None:
        """Every page is free, held by the prefix cache, or held by one of `held` (the live requests: none when the
        engine is idle; `in_flight` as for held_pages), exactly once; each live request's row points at its locked
        prefix; when nothing runs, nothing in the cache is still locked (AssertionError naming the fault)."""
        self.prefix_cache.check_integrity()
        ps = self.page_size
        free = self._free_pages
        cached = [s // ps for s in self.prefix_cache.cached_slots()[::ps].tolist()]
        owned = self.held_pages(held, in_flight) if held else []
        if len(set(free)) != len(free):
            raise AssertionError(f"KV pages double-freed: {len(free) - len(set(free))} duplicates on the free list")
        if set(free) & set(cached):
            raise AssertionError(f"KV pages both free and cached: {sorted(set(free) & set(cached))[:8]}")
        if len(set(owned)) != len(owned):
            raise AssertionError("KV pages held by two live requests (or twice by one)")
        if set(owned) & (set(free) | set(cached)):
            raise AssertionError(f"KV pages of a live request also free or cached: "
                                 f"{sorted(set(owned) & (set(free) | set(cached)))[:8]}")
        if len(free) + len(cached) + len(owned) != self.num_pages:
            raise AssertionError(f"KV pages leaked: {self.num_pages - len(free) - len(cached) - len(owned)} of "
                                 f"{self.num_pages} neither free nor cached" + (" nor held" if held else ""))
        if any(self._is_free[p] for p in cached + owned) or not all(self._is_free[p] for p in free):
            raise AssertionError("KV page flags disagree with the free list")
        for r in held:
            if r.cache_handle is not None and r.cache_handle.cached_len:
                n = r.cache_handle.cached_len
                if not torch.equal(self.host_table[r.table_idx, :n], self.prefix_cache.slots(r.cache_handle).to(
                        self.host_table.dtype)):
                    raise AssertionError(f"request {r.uid}'s row does not point at its cached prefix")
        if self.hicache is not None:  # chapter 28: each lock is a live request's or a copy's in flight, exactly
            self.hicache.check_locks(held)
        elif not held and self.prefix_cache.protected_size:
            raise AssertionError(f"{self.prefix_cache.protected_size} cached slots are still locked by no request")
