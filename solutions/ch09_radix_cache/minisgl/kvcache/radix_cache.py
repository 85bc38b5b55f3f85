"""RadixCache: a radix tree of token sequences whose KV is cached, shared by every request that starts
with the same tokens.

Each node holds a run of tokens (`key`) and the KV slots of those tokens (`value`); the path from the root
spells a cached prefix. Everything is in whole pages: a node's length is a multiple of page_size and a
child is found by its first page of tokens. A node is locked (ref_count > 0) while a running request
uses it; unlocked leaves are evicted least recently used first when the pool runs short.
"""

from __future__ import annotations

import heapq

import torch

from minisgl.kvcache.prefix_cache import BasePrefixCache, CacheHandle


class RadixNode:
    def __init__(self, key: list[int], value: torch.Tensor, parent: RadixNode | None) -> None:
        self.key = key  # token ids of this run
        self.value = value  # their KV slots, same length
        self.parent = parent
        self.children: dict[tuple[int, ...], RadixNode] = {}
        self.ref_count = 0  # running requests whose prefix passes through this node
        self.last_access = 0

    def __len__(self) -> int:
        return len(self.key)

    def __lt__(self, other: RadixNode) -> bool:  # heap order for eviction: least recently used first
        return self.last_access < other.last_access


class RadixCache(BasePrefixCache):
    def __init__(self, page_size: int = 1, device: torch.device | str = "cpu") -> None:
        self.page_size = page_size
        self.device = torch.device(device)
        self.root = RadixNode([], torch.empty(0, dtype=torch.int32, device=self.device), None)
        self.root.ref_count = 1  # the root is never evicted
        self._clock = 0  # logical time for LRU: deterministic, unlike wall time
        self._evictable = 0  # slots in nodes with ref_count == 0
        self._protected = 0  # slots in locked nodes

    @property
    def evictable_size(self) -> int:
        return self._evictable

    @property
    def protected_size(self) -> int:
        return self._protected

    def _first_page(self, ids: list[int], pos: int = 0) -> tuple[int, ...]:
        return tuple(ids[pos : pos + self.page_size])

    def _common_len(self, key: list[int], ids: list[int], pos: int) -> int:
        """Leading tokens that key and ids[pos:] share, rounded down to whole pages.

        Compared as list slices (a loop in C; a Python loop over tokens takes ~25 us per 1,024): the whole run
        first, the usual case; else the longest matching run of pages by binary lifting, halving the step."""
        page = self.page_size
        pages = min(len(key), len(ids) - pos) // page
        if key[: pages * page] == ids[pos : pos + pages * page]:
            return pages * page
        n, step = 0, 1 << (pages.bit_length() - 1)  # in pages; the first `n` pages are known to match
        while step:
            if n + step <= pages and key[n * page : (n + step) * page] == ids[pos + n * page : pos + (n + step) * page]:
                n += step
            step >>= 1
        return n * page

    def _split(self, node: RadixNode, k: int) -> RadixNode:
        """Cut `node` after its first k tokens (a page multiple, 0 < k < len): a new node with those k tokens
        takes its place under the parent, and `node` keeps the rest as its only child. Returns the new node."""
        # TODO(ch09): the new node gets key[:k] and value[:k], the same ref_count (every lock through node also
        # passes through it) and last_access; hang it where node was (parent.children under its first page),
        # then make node its child with key[k:] and value[k:].
        # >>> solution
        parent = node.parent
        head = RadixNode(node.key[:k], node.value[:k], parent)
        head.ref_count, head.last_access = node.ref_count, node.last_access
        parent.children[self._first_page(head.key)] = head
        node.key, node.value, node.parent = node.key[k:], node.value[k:], head
        head.children[self._first_page(node.key)] = node
        return head
        # <<< solution

    def _walk(self, ids: list[int]) -> tuple[RadixNode, int]:
        """Follow ids (whole pages) down the tree as far as it matches, splitting a node matched only in part
        so that the match ends exactly at a node. Every node passed is touched (last_access). Returns the last
        node matched and the matched length."""
        # TODO(ch09): from the root, look up the child under the next page of ids; count the common tokens
        # (_common_len); split the child if the match ends inside it; advance. Stop when ids are used up or no
        # child matches. One tick per walk: add 1 to self._clock once, at the start (a walk that matches nothing
        # too), and stamp that value as last_access on every node on the way (not only the last one: LRU reads
        # the stamps of the shared nodes too).
        # >>> solution
        self._clock += 1
        node, pos = self.root, 0
        while pos < len(ids):
            child = node.children.get(self._first_page(ids, pos))
            if child is None:
                break
            n = self._common_len(child.key, ids, pos)
            if n < len(child):
                child = self._split(child, n)
            child.last_access = self._clock
            node, pos = child, pos + n
        return node, pos
        # <<< solution

    def slots(self, handle: CacheHandle) -> torch.Tensor:
        parts, node = [], (handle.node if handle.node is not None else self.root)
        while node is not self.root:
            parts.append(node.value)
            node = node.parent
        return torch.cat(parts[::-1]) if parts else self.root.value

    def match_prefix(self, ids: list[int]) -> tuple[CacheHandle, torch.Tensor]:
        ids = list(ids)[: len(ids) - len(ids) % self.page_size]
        node, matched = self._walk(ids)
        handle = CacheHandle(matched, node)
        return handle, self.slots(handle)

    def insert_prefix(self, ids: list[int], slots: torch.Tensor) -> tuple[int, CacheHandle]:
        if len(ids) % self.page_size or len(ids) != len(slots):
            raise ValueError(f"insert needs whole pages of ids and one slot per id ({len(ids)} ids, {len(slots)} slots)")
        # TODO(ch09): walk as far as the tree already has ids; hang the rest (if any) under the last node as a
        # new leaf (key ids[pos:], value a copy of slots[pos:]: the caller's page-table row changes later),
        # stamped with the current clock (the walk's tick) and counted as evictable. Return (matched length,
        # handle to the end).
        # >>> solution
        ids = list(ids)
        node, pos = self._walk(ids)
        if pos < len(ids):
            leaf = RadixNode(ids[pos:], slots[pos:].clone(), node)
            leaf.last_access = self._clock
            node.children[self._first_page(leaf.key)] = leaf
            self._evictable += len(leaf)
            node = leaf
        return pos, CacheHandle(len(ids), node)
        # <<< solution

    def lock_handle(self, handle: CacheHandle, unlock: bool = False) -> None:
        # TODO(ch09): walk from handle.node up to (not including) the root; locking adds 1 to each ref_count,
        # unlocking subtracts 1. A node going 0 -> 1 moves its length from evictable to protected, 1 -> 0 back.
        # A handle with no node (nothing cached) locks nothing. Unlocking a node whose ref_count is already 0 is
        # RuntimeError("unlock of a prefix that is not locked") (the tests match "not locked").
        # >>> solution
        node = handle.node
        while node is not None and node is not self.root:
            if unlock:
                if node.ref_count <= 0:
                    raise RuntimeError("unlock of a prefix that is not locked")
                node.ref_count -= 1
                if node.ref_count == 0:
                    self._protected -= len(node)
                    self._evictable += len(node)
            else:
                if node.ref_count == 0:
                    self._evictable -= len(node)
                    self._protected += len(node)
                node.ref_count += 1
            node = node.parent
        # <<< solution

    def evict(self, num_slots: int) -> torch.Tensor:
        # TODO(ch09): put every unlocked leaf on a heap (RadixNode orders by last_access); pop the least
        # recently used, detach it from its parent, keep its slots; a parent left childless and unlocked
        # becomes a leaf and joins the heap. Stop once num_slots are freed. Asking for more than evictable_size
        # raises MemoryError before anything is evicted.
        # >>> solution
        if num_slots > self._evictable:
            raise MemoryError(f"cannot evict {num_slots} slots: only {self._evictable} are unlocked")
        if num_slots <= 0:
            return self.root.value
        heap = [n for n in self._nodes() if not n.children and n.ref_count == 0]
        heapq.heapify(heap)
        freed, total = [], 0
        while total < num_slots:
            leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[self._first_page(leaf.key)]
            freed.append(leaf.value)
            total += len(leaf)
            self._evictable -= len(leaf)
            if parent is not self.root and not parent.children and parent.ref_count == 0:
                heapq.heappush(heap, parent)
        return torch.cat(freed)
        # <<< solution

    def _nodes(self) -> list[RadixNode]:
        """Every node but the root."""
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    def cached_slots(self) -> torch.Tensor:
        nodes = self._nodes()
        return torch.cat([n.value for n in nodes]) if nodes else self.root.value

    def check_integrity(self) -> None:
        evictable = protected = 0
        for node in self._nodes():
            assert len(node.key) == len(node.value) and len(node) % self.page_size == 0 and len(node) > 0, \
                "a node holds whole pages, one slot per token"
            assert node.parent.children.get(self._first_page(node.key)) is node, "a node hangs under its first page"
            assert 0 <= node.ref_count <= node.parent.ref_count or node.parent is self.root, \
                "a lock on a node also locks its ancestors"
            if node.ref_count:
                protected += len(node)
            else:
                evictable += len(node)
        assert (evictable, protected) == (self._evictable, self._protected), "size counters disagree with the tree"
        slots = self.cached_slots().tolist()
        assert len(set(slots)) == len(slots), "a slot appears twice in the tree"
