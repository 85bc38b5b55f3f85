"""HiCacheManager: the scheduler's side of the host KV tier (chapter 28): it sizes the host pool, backs nodes up
(device -> host), loads host hits back before a request's prefill (host -> device), and keeps every copy that has
not finished yet, with the lock that keeps its node in place until then.

On a GPU the copies run on a side CUDA stream: a write waits for the forward passes that computed the KV, and the
scheduler's stream waits for a load before the prefill that reads it. Between the tiers the data goes through
pinned staging buffers; a write's last step (into the host pool) runs on the CPU once its copy has landed (poll).
On a CPU every copy is done when it returns; the copy still counts as in flight until the next poll, as a GPU
copy would, so the locks and the accounting take the same path on both.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from minisgl.core import Req
from minisgl.kvcache.hiradix_cache import HiNode, HiRadixCache
from minisgl.kvcache.host_pool import HostKVPool, gather_device, scatter_device
from minisgl.kvcache.prefix_cache import CacheHandle
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.config import SchedulerConfig


@dataclass
class Copy:
    """One copy between the tiers that has not been polled as finished yet."""

    to_host: bool
    tokens: int
    nbytes: int
    node: HiNode | None  # locked until the copy finishes (None: a write-back's node, whose device pages are gone)
    started: float  # perf_counter at launch (CPU timing)
    seconds: float = 0.0  # the CPU path's measured time
    events: tuple[torch.cuda.Event, torch.cuda.Event] | None = None  # GPU: start and end on the copy stream
    staged: torch.Tensor | None = None  # GPU: the pinned buffer the copy goes through
    host_slots: torch.Tensor | None = None  # GPU write: where the staged KV goes in the host pool, once landed
    keep: list = field(default_factory=list)  # tensors the copy stream reads, alive until it is done


def host_pool_pages(config: SchedulerConfig, device_pages: int, bytes_per_page: int) -> int:
    """Pages of the host pool: hicache_size GB when given, else hicache_ratio times the device pool's pages."""
    if config.hicache_size:
        pages = int(config.hicache_size * 2**30 // bytes_per_page)
    else:
        pages = int(device_pages * config.hicache_ratio)
    if pages < 1:
        raise ValueError(f"the host KV pool would hold {pages} pages (hicache_ratio {config.hicache_ratio}, "
                         f"hicache_size {config.hicache_size} GB): at least one is needed")
    return pages


class HiCacheManager:
    def __init__(self, config: SchedulerConfig, kv_pool, cache: CacheManager) -> None:
        if not hasattr(cache.prefix_cache, "_walk"):
            raise ValueError("enable_hierarchical_cache needs the radix prefix cache (cache_type='radix')")
        if cache.prefix_cache.cached_slots().numel():
            raise ValueError("the host tier must be attached before anything is cached")
        self.kv_pool = kv_pool
        self.cache = cache
        self.device = cache.device
        ps = cache.page_size
        cuda = self.device.type == "cuda"
        pages = host_pool_pages(config, cache.num_pages, kv_pool.bytes_per_slot * ps)
        self.host_pool = HostKVPool(kv_pool, pages, ps, pin_memory=cuda)
        self.tree = HiRadixCache(ps, self.host_pool, config.hicache_write_policy)
        self.tree.backup = self.backup
        cache.prefix_cache, cache.hicache = self.tree, self
        self.copy_stream = torch.cuda.Stream(self.device) if cuda else None
        self.in_flight: list[Copy] = []
        # What the tier did: tokens and bytes each way, and the seconds the copies took (finished ones only).
        self.stats = Counter({"loaded_tokens": 0, "backed_up_tokens": 0, "h2d_bytes": 0, "d2h_bytes": 0})
        self.seconds = {"h2d": 0.0, "d2h": 0.0}

    # --- copies -----------------------------------------------------------------------------------------------------

    def _launch(self, to_host: bool, device_slots: torch.Tensor, host_slots: torch.Tensor,
                node: HiNode | None) -> Copy:
        n = len(host_slots)
        op = Copy(to_host, n, n * self.host_pool.bytes_per_slot, node, time.perf_counter())
        if node is not None:
            self.tree.lock_handle(CacheHandle(0, node))  # the node stays where it is until the copy is done
        if self.copy_stream is None:
            self.host_pool.copy_pages(self.kv_pool, device_slots, host_slots, to_host)
            op.seconds = time.perf_counter() - op.started
        else:
            self._launch_cuda(op, device_slots.to(torch.int64), host_slots.to(torch.int64))
        self.stats["d2h_bytes" if to_host else "h2d_bytes"] += op.nbytes
        self.in_flight.append(op)
        return op

    def _launch_cuda(self, op: Copy, device_slots: torch.Tensor, host_slots: torch.Tensor) -> None:
        """Queue the copy on the side stream: after the work already queued on the scheduler's stream (the KV a
        write reads was written there), and before whatever the scheduler's stream queues next (a prefill reads
        what a load writes; a write-back's device pages are reused)."""
        main, side = torch.cuda.current_stream(self.device), self.copy_stream
        d_slots = device_slots.to(self.device, non_blocking=True)  # on main: the side stream's wait covers it
        side.wait_stream(main)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(side):
            start.record()
            if op.to_host:
                op.staged = torch.empty((2, self.host_pool.num_layers, len(host_slots),
                                         *self.host_pool.buffer.shape[3:]), dtype=self.host_pool.buffer.dtype,
                                        pin_memory=True)
                op.staged.copy_(gather_device(self.kv_pool, d_slots), non_blocking=True)
                op.host_slots = host_slots
            else:
                op.staged = self.host_pool.buffer[:, :, host_slots].pin_memory()
                scatter_device(self.kv_pool, d_slots, op.staged.to(self.device, non_blocking=True))
            end.record()
        op.keep.append(d_slots)
        d_slots.record_stream(side)
        op.events = (start, end)
        main.wait_event(end)

    def _done(self, op: Copy, wait: bool) -> bool:
        if op.events is None:
            return True
        if wait:
            op.events[1].synchronize()
        elif not op.events[1].query():
            return False
        if op.to_host:  # the staged KV has landed in pinned memory: into the host pool now
            self.host_pool.buffer[:, :, op.host_slots] = op.staged
        op.seconds = op.events[0].elapsed_time(op.events[1]) / 1e3
        return True

    def poll(self, wait: bool = False) -> None:
        """Retire the copies that have finished (all of them with `wait`), in launch order: unlock their nodes and
        count their time."""
        still = []
        for op in self.in_flight:
            if still or not self._done(op, wait):  # in order: a later write may reuse an earlier one's host pages
                still.append(op)
                continue
            if op.node is not None:
                self.tree.lock_handle(CacheHandle(0, op.node), unlock=True)
            self.seconds["d2h" if op.to_host else "h2d"] += op.seconds
        self.in_flight = still

    def flush(self) -> None:
        self.poll(wait=True)

    def backup(self, node: HiNode) -> bool:
        """Give a device node a host copy (the tree's hook: write-through at insert, write-back at eviction); False
        when the host pool has no room even after evicting host-only leaves. A write-back's node is not locked: its
        device pages are freed right after, and on a GPU the scheduler's stream waits for the copy before reusing
        them."""
        slots = self.tree.alloc_host(len(node))
        if slots is None:
            return False
        node.host_value = slots
        through = self.tree.write_policy == "write_through"  # write-back: the node is being evicted, not locked
        self._launch(True, node.value, slots, node if through else None)
        self.stats["backed_up_tokens"] += len(node)
        return True

    def load_back(self, device: CacheHandle, host: CacheHandle) -> tuple[CacheHandle, torch.Tensor]:
        """Bring a request's host hit back to the device before its prefill. `device` is the match's device part,
        `host` the end of the whole match, both locked by the caller (the request). Every node between them gets new
        device pages and the copy into them is launched; the copy holds a lock of its own on the last node until it
        finishes (the request may be aborted before). Returns the handle and device slots of the whole match."""
        # TODO(ch28): finish copies still in flight first (a load may read host pages a write has not filled yet:
        # self.poll(wait=True)). The host-only nodes are self.tree._path(host.node, device.node); take device pages for
        # all their tokens at once (self.cache.allocate_slots), attach each node's share (self.tree.attach_device),
        # launch one copy of all their host slots into those pages (self._launch(False, ..., host.node): it locks
        # host.node), count loaded_tokens. Return (host, self.tree.slots(host)).
        raise NotImplementedError("TODO(ch28): HiCacheManager.load_back")

    # --- accounting -------------------------------------------------------------------------------------------------

    def check_locks(self, held: Sequence[Req]) -> None:
        """Locks balance exactly: every node's ref_count is the number of live requests whose prefix passes through
        it plus the copies in flight that hold it (AssertionError naming the first node that differs)."""
        want: Counter = Counter()
        handles = [r.cache_handle.node for r in held if r.cache_handle is not None and r.cache_handle.node is not None]
        for node in handles + [op.node for op in self.in_flight if op.node is not None]:
            while node is not None and node is not self.tree.root:
                want[id(node)] += 1
                node = node.parent
        for node in self.tree._nodes():
            if node.ref_count != want[id(node)]:
                raise AssertionError(f"a node of {len(node)} tokens ({'device' if node.on_device else 'host only'}) "
                                     f"has {node.ref_count} locks, but {want[id(node)]} live requests and copies in "
                                     f"flight pass through it")

    def status(self) -> dict[str, int]:
        out = dict(self.stats)
        out |= self.tree.tier_sizes()
        out |= {"host_free_slots": self.host_pool.free_slots, "host_total_slots": self.host_pool.num_slots,
                "copies_in_flight": len(self.in_flight)}
        return out

    def bandwidth(self) -> dict[str, float]:
        """GB/s each way over the finished copies (0 where none ran)."""
        return {k: (self.stats[f"{k}_bytes"] / self.seconds[k] / 1e9 if self.seconds[k] else 0.0)
                for k in ("h2d", "d2h")}
