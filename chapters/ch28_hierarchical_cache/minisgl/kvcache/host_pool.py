"""HostKVPool: the host-memory tier of the KV cache (chapter 28).

It keeps the keys and values of evicted prefixes in host memory, in the device pool's layout slot for slot
([keys | values, layer, slot, kv_head, head_dim]), handed out in whole pages as the device pool is. On a machine
with CUDA the buffer is pinned (page-locked), so that copies to and from the GPU can run asynchronously at the
link's speed; on a CPU it is plain memory and a "copy" is an indexed move between two CPU tensors.

The pool only stores and hands out pages; who owns them is the radix tree's business (kvcache/hiradix_cache.py),
and when the copies run is the scheduler's (scheduler/hicache.py).
"""

from __future__ import annotations

import torch

from minisgl.kvcache.base import BaseKVCache


def gather_device(pool: BaseKVCache, slots: torch.Tensor) -> torch.Tensor:
    """The keys and values of `slots` of every layer of a device pool: [2, layers, len(slots), kv_heads, head_dim]."""
    layers = range(pool.num_layers)
    return torch.stack([torch.stack([pool.k_cache(i)[slots] for i in layers]),
                        torch.stack([pool.v_cache(i)[slots] for i in layers])])


def scatter_device(pool: BaseKVCache, slots: torch.Tensor, kv: torch.Tensor) -> None:
    """Write kv ([2, layers, len(slots), ...], as gather_device gives it) into `slots` of every layer."""
    for i in range(pool.num_layers):
        pool.k_cache(i)[slots] = kv[0, i]
        pool.v_cache(i)[slots] = kv[1, i]


class HostKVPool:
    def __init__(self, device_pool: BaseKVCache, num_pages: int, page_size: int, pin_memory: bool = False) -> None:
        if num_pages < 1:
            raise ValueError(f"the host KV pool needs at least one page, got {num_pages}")
        self.page_size = page_size
        self.num_pages = num_pages
        k = device_pool.k_cache(0)
        self.num_layers = device_pool.num_layers
        self.buffer = torch.zeros(2, self.num_layers, num_pages * page_size, *k.shape[1:], dtype=k.dtype,
                                  pin_memory=pin_memory)
        self._free_pages: list[int] = list(range(num_pages - 1, -1, -1))
        self._is_free = [True] * num_pages

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    @property
    def free_slots(self) -> int:
        return len(self._free_pages) * self.page_size

    @property
    def bytes_per_slot(self) -> int:
        return self.buffer[:, :, 0].numel() * self.buffer.element_size()

    def alloc(self, num_slots: int) -> torch.Tensor | None:
        """Slots of num_slots / page_size free pages, page after page; None (nothing taken) if too few are free."""
        n = num_slots // self.page_size
        if num_slots % self.page_size or n > len(self._free_pages):
            return None
        pages = [self._free_pages.pop() for _ in range(n)]
        for p in pages:
            self._is_free[p] = False
        offsets = torch.arange(self.page_size, dtype=torch.int64)
        return (torch.tensor(pages, dtype=torch.int64)[:, None] * self.page_size + offsets).flatten()

    def free(self, slots: torch.Tensor) -> None:
        """Give back the pages of `slots` (whole pages); ValueError, nothing freed, on a page already free."""
        pages = [s // self.page_size for s in slots[:: self.page_size].tolist()]
        bad = [p for p in pages if not 0 <= p < self.num_pages or self._is_free[p]]
        if bad or len(set(pages)) != len(pages):
            raise ValueError(f"double free or invalid host KV pages: {sorted(set(bad)) or pages}")
        for p in pages:
            self._is_free[p] = True
        self._free_pages.extend(pages)

    def copy_pages(self, device_pool: BaseKVCache, device_slots: torch.Tensor, host_slots: torch.Tensor,
                   to_host: bool) -> None:
        """Copy the KV of whole pages between the tiers, slot i of one side to slot i of the other: device_slots to
        host_slots when to_host (a write), host_slots to device_slots otherwise (a load). Synchronous: the CPU path,
        and the GPU path's fallback (scheduler/hicache.py queues the GPU's copies on a side stream instead)."""
        # TODO(ch28): a write gathers the device slots of every layer (gather_device) and stores them at host_slots of
        # self.buffer (dims 0 and 1 are keys/values and layers, dim 2 the slot); a load reads self.buffer at
        # host_slots and writes it into the device slots (scatter_device), moved to the device pool's device.
        raise NotImplementedError("TODO(ch28): HostKVPool.copy_pages")

    def check_integrity(self, owned: list[int]) -> None:
        """Every host page is free or owned (`owned`: the first slot of each page the tree holds), exactly once."""
        ps = self.page_size
        pages = [s // ps for s in owned]
        free = self._free_pages
        if len(set(pages)) != len(pages):
            raise AssertionError("host KV pages owned twice (by two nodes, or twice by one)")
        if set(pages) & set(free):
            raise AssertionError(f"host KV pages both free and owned: {sorted(set(pages) & set(free))[:8]}")
        if len(set(free)) != len(free):
            raise AssertionError("host KV pages double-freed")
        if len(pages) + len(free) != self.num_pages:
            raise AssertionError(f"host KV pages leaked: {self.num_pages - len(pages) - len(free)} of "
                                 f"{self.num_pages} neither free nor owned by a node")
        if any(self._is_free[p] for p in pages) or not all(self._is_free[p] for p in free):
            raise AssertionError("host KV page flags disagree with the free list")
