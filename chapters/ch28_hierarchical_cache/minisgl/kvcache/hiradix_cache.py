"""HiRadixCache: chapter 9's radix tree over two tiers of KV memory, the device pool and a host pool under it.

A node's KV can live on the device (`value`: device slots), on the host (`host_value`: host slots), or both. Two
rules keep the tree easy to walk:

  - what is on the device is a prefix: a node on the device has its parent on the device too (eviction takes
    device leaves first), so a match reads device nodes first and host-only nodes after them;
  - every node is somewhere: evicting a node from the device keeps it, host-only, when its KV is on the host
    (write-through backed it up when it was inserted; write-back backs it up now), and removes it otherwise.

Host pages have their own LRU: when the host pool runs short, host-only leaves no one locks go first.

The tree does no copying itself: `backup(node)` is the controller's (scheduler/hicache.py), which finds host
pages (alloc_host), queues the copy and records the node's host slots.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import torch

from minisgl.kvcache.host_pool import HostKVPool
from minisgl.kvcache.prefix_cache import CacheHandle
from minisgl.kvcache.radix_cache import RadixCache, RadixNode

WRITE_POLICIES = ("write_through", "write_back")


class HiNode(RadixNode):
    def __init__(self, key: list[int], value: torch.Tensor | None, parent: HiNode | None,
                 host_value: torch.Tensor | None = None) -> None:
        super().__init__(key, value, parent)
        self.host_value = host_value  # its KV's host slots, None when it has no host copy

    @property
    def on_device(self) -> bool:
        return self.value is not None

    @property
    def backed_up(self) -> bool:
        return self.host_value is not None


class HiRadixCache(RadixCache):
    def __init__(self, page_size: int, host_pool: HostKVPool, write_policy: str = "write_through",
                 device: torch.device | str = "cpu") -> None:
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"write_policy must be one of {', '.join(WRITE_POLICIES)}, got {write_policy!r}")
        super().__init__(page_size, device)
        empty = self.root.value
        self.root = HiNode([], empty, None, host_value=empty.to(torch.int64))
        self.root.ref_count = 1
        self.host_pool = host_pool
        self.write_policy = write_policy
        self.host_evicted_tokens = 0  # tokens whose host copy the host LRU dropped
        # The controller's copy: give `node` (on the device) a host copy; False if the host pool has no room.
        self.backup: Callable[[HiNode], bool] = lambda node: False

    # --- the tree's shape: nodes on two tiers ----------------------------------------------------------------------

    def _split(self, node: HiNode, k: int) -> HiNode:
        parent = node.parent
        head = HiNode(node.key[:k], None if node.value is None else node.value[:k], parent,
                      None if node.host_value is None else node.host_value[:k])
        head.ref_count, head.last_access = node.ref_count, node.last_access
        parent.children[self._first_page(head.key)] = head
        node.key, node.parent = node.key[k:], head
        node.value = None if node.value is None else node.value[k:]
        node.host_value = None if node.host_value is None else node.host_value[k:]
        head.children[self._first_page(node.key)] = node
        return head

    def _path(self, node: HiNode, stop: HiNode | None = None) -> list[HiNode]:
        """The nodes from below `stop` (default: the root) down to `node`, root side first."""
        stop = stop or self.root
        out = []
        while node is not stop and node is not self.root:
            out.append(node)
            node = node.parent
        return out[::-1]

    def attach_device(self, node: HiNode, slots: torch.Tensor) -> None:
        """`node` (host-only) now has its KV at these device slots too (a load, or a request that computed it)."""
        assert node.value is None and len(slots) == len(node), "attach device slots to a host-only node, one per token"
        node.value = slots.clone()
        if node.ref_count:
            self._protected += len(node)
        else:
            self._evictable += len(node)

    # --- matching and inserting -------------------------------------------------------------------------------------

    def match_prefix(self, ids: list[int]) -> tuple[CacheHandle, torch.Tensor]:
        handle, slots, _ = self.match_tiers(ids)
        return handle, slots

    def match_tiers(self, ids: list[int]) -> tuple[CacheHandle, torch.Tensor, CacheHandle | None]:
        """The longest cached prefix of `ids` (whole pages) across both tiers: the handle of its device part and that
        part's device slots, then a handle to the end of the whole match when host-only nodes follow the device part
        (None when the match ends on the device)."""
        # TODO(ch28): walk ids down the tree (_walk: whole pages, splits a node matched only in part, touches LRU).
        # From the last node matched, go up past the host-only nodes (not on_device): the first node on the device
        # (or the root) ends the device part, whose length is the match's minus the host-only nodes' lengths.
        raise NotImplementedError("TODO(ch28): HiRadixCache.match_tiers")

    def insert_prefix(self, ids: list[int], slots: torch.Tensor) -> tuple[int, CacheHandle]:
        """As RadixCache.insert_prefix; host-only nodes on the way take the caller's slots (its KV is the same), so
        the count of tokens cached already is the device part's. Write-through backs the new leaf up at once."""
        if len(ids) % self.page_size or len(ids) != len(slots):
            raise ValueError(f"insert needs whole pages of ids and one slot per id ({len(ids)} ids, {len(slots)} slots)")
        ids = list(ids)
        node, pos = self._walk(ids)
        existed = at = 0
        for n in self._path(node):  # device nodes first (the device part is a prefix), then host-only ones
            if n.on_device:
                existed = at + len(n)
            else:
                self.attach_device(n, slots[at : at + len(n)])
            at += len(n)
        if pos < len(ids):
            leaf = HiNode(ids[pos:], slots[pos:].clone(), node)
            leaf.last_access = self._clock
            node.children[self._first_page(leaf.key)] = leaf
            self._evictable += len(leaf)
            node = leaf
            if self.write_policy == "write_through":
                self.backup(leaf)
        return existed, CacheHandle(len(ids), node)

    def lock_handle(self, handle: CacheHandle, unlock: bool = False) -> None:
        """As RadixCache.lock_handle; the evictable/protected counters count device slots, so a host-only node's
        lock changes only its ref_count (a locked host-only node keeps its host pages: it is being loaded)."""
        node = handle.node
        while node is not None and node is not self.root:
            if unlock and node.ref_count <= 0:
                raise RuntimeError("unlock of a prefix that is not locked")
            before = node.ref_count
            node.ref_count += -1 if unlock else 1
            if node.on_device and (before == 0 or node.ref_count == 0):
                moved = len(node) if before == 0 else -len(node)
                self._protected += moved
                self._evictable -= moved
            node = node.parent

    # --- eviction: device pages, then host pages -----------------------------------------------------------------

    def _device_leaf(self, node: HiNode) -> bool:
        """On the device, unlocked, and no child on the device: the device copy it holds can go."""
        return (node is not self.root and node.on_device and node.ref_count == 0
                and not any(c.on_device for c in node.children.values()))

    def evict(self, num_slots: int) -> torch.Tensor:
        """Free at least num_slots device slots, least recently used device leaves first, each demoted (_demote).
        MemoryError before anything changes if fewer are unlocked."""
        if num_slots > self._evictable:
            raise MemoryError(f"cannot evict {num_slots} slots: only {self._evictable} are unlocked")
        if num_slots <= 0:
            return self.root.value
        heap = [n for n in self._nodes() if self._device_leaf(n)]
        heapq.heapify(heap)
        freed, total = [], 0
        while total < num_slots:
            node = heapq.heappop(heap)
            parent = node.parent
            freed.append(node.value)
            total += len(node)
            self._demote(node)
            if self._device_leaf(parent):
                heapq.heappush(heap, parent)
        return torch.cat(freed)

    def _demote(self, node: HiNode) -> None:
        """`node` (an unlocked device leaf) gives up its device slots, which the caller frees: it stays in the tree,
        host-only, when its KV is on the host, and leaves the tree otherwise."""
        # TODO(ch28): under write_back a node without a host copy is backed up now (self.backup(node): the copy
        # reads its device slots, so before they are dropped). Then drop the device slots (value None, and its
        # length leaves the evictable count); a node that still has no host copy is removed (_remove).
        raise NotImplementedError("TODO(ch28): HiRadixCache._demote")

    def _remove(self, node: HiNode) -> None:
        """Take a node off the device (already done) and out of the tree; its subtree, all host-only below a node off
        the device, goes with it and frees its host pages."""
        del node.parent.children[self._first_page(node.key)]
        stack = [node]
        while stack:
            n = stack.pop()
            assert not n.on_device and n.ref_count == 0, "only unlocked nodes off the device leave the tree"
            if n.backed_up:
                self.host_pool.free(n.host_value)
                n.host_value = None
            stack.extend(n.children.values())

    @property
    def host_evictable_size(self) -> int:
        """Host slots eviction can free: those of unlocked host-only nodes (their subtrees are host-only too)."""
        return sum(len(n) for n in self._nodes() if not n.on_device and n.ref_count == 0)

    def evict_host(self, num_slots: int) -> int:
        """Free at least num_slots host slots by removing unlocked host-only leaves, least recently used first, as
        far as there are any; the number freed."""
        heap = [n for n in self._nodes() if not n.on_device and not n.children and n.ref_count == 0]
        heapq.heapify(heap)
        total = 0
        while total < num_slots and heap:
            node = heapq.heappop(heap)
            parent = node.parent
            total += len(node)
            self._remove(node)
            self.host_evicted_tokens += len(node)
            if parent is not self.root and not parent.on_device and not parent.children and parent.ref_count == 0:
                heapq.heappush(heap, parent)
        return total

    def alloc_host(self, num_slots: int) -> torch.Tensor | None:
        """Host slots for a backup, evicting host-only leaves if the pool is short; None if even that is not enough
        (the node then has no host copy)."""
        short = num_slots - self.host_pool.free_slots
        if short > 0:
            if short > self.host_evictable_size:
                return None
            self.evict_host(short)
        return self.host_pool.alloc(num_slots)

    # --- what the tree holds ----------------------------------------------------------------------------------------

    def cached_slots(self) -> torch.Tensor:
        values = [n.value for n in self._nodes() if n.on_device]
        return torch.cat(values) if values else self.root.value

    def host_slots(self) -> torch.Tensor:
        values = [n.host_value for n in self._nodes() if n.backed_up]
        return torch.cat(values) if values else self.root.host_value

    def tier_sizes(self) -> dict[str, int]:
        """Tokens cached on the device only, on the host only, and on both."""
        nodes = self._nodes()
        return {"device_only_tokens": sum(len(n) for n in nodes if n.on_device and not n.backed_up),
                "host_only_tokens": sum(len(n) for n in nodes if not n.on_device),
                "both_tiers_tokens": sum(len(n) for n in nodes if n.on_device and n.backed_up),
                "host_evicted_tokens": self.host_evicted_tokens}

    def check_integrity(self) -> None:
        """RadixCache's checks over the device slots, the two tier rules, and the host pool: every host page free or
        owned by exactly one node."""
        evictable = protected = 0
        for node in self._nodes():
            assert len(node) % self.page_size == 0 and len(node) > 0, "a node holds whole pages"
            assert node.parent.children.get(self._first_page(node.key)) is node, "a node hangs under its first page"
            assert node.parent is self.root or 0 <= node.ref_count <= node.parent.ref_count, \
                "a lock on a node also locks its ancestors"
            assert node.on_device or node.backed_up, f"a node ({len(node)} tokens) has its KV on neither tier"
            assert not node.on_device or node.parent is self.root or node.parent.on_device, \
                "a node on the device under a node off the device: the device part is no longer a prefix"
            assert node.value is None or len(node.value) == len(node), "one device slot per token"
            assert node.host_value is None or len(node.host_value) == len(node), "one host slot per token"
            if node.on_device:
                if node.ref_count:
                    protected += len(node)
                else:
                    evictable += len(node)
        assert (evictable, protected) == (self._evictable, self._protected), \
            f"device size counters (evictable, protected) = {(self._evictable, self._protected)}, the tree holds " \
            f"{(evictable, protected)}"
        slots = self.cached_slots().tolist()
        assert len(set(slots)) == len(slots), "a device slot appears twice in the tree"
        self.host_pool.check_integrity(self.host_slots()[:: self.page_size].tolist())
