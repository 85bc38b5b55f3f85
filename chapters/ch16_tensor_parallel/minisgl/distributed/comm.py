"""The collectives the model and the scheduler use. All are no-ops for a single rank.

Two groups per tensor-parallel run: the model's group (NCCL on CUDA, gloo on the CPU) carries activations;
a gloo group on the CPU carries Python objects (the work rank 0 hands out) and small integers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from minisgl.distributed.info import DistributedInfo, get_tp_info, set_tp_info

_CPU_GROUP: Any = None
# A rank waiting for work may wait as long as the caller is idle; a dead peer is noticed by its closed
# connection (gloo) or by the parent process watching every rank (llm/tp.py), not by this timeout.
IDLE_TIMEOUT = timedelta(days=1)


def rendezvous_store() -> dist.TCPStore:
    """The store one group's ranks meet at, served by the process that starts them. Port 0: the system picks a
    free port and this process keeps it bound while the store lives, so no other process can take it before the
    ranks arrive (choosing a free port, closing it and handing the number on leaves that window open)."""
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=IDLE_TIMEOUT)


def init_process_groups(rank: int, size: int, store_port: int, device: torch.device) -> None:
    """Join the group of `size` ranks meeting at the store on 127.0.0.1:store_port (rendezvous_store) and record
    this rank's info."""
    global _CPU_GROUP
    backend = "nccl" if device.type == "cuda" else "gloo"
    store = dist.TCPStore("127.0.0.1", store_port, is_master=False, timeout=IDLE_TIMEOUT)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=IDLE_TIMEOUT,
                            device_id=device if device.type == "cuda" else None)
    _CPU_GROUP = dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT) if backend == "nccl" else dist.group.WORLD
    set_tp_info(DistributedInfo(rank, size))


def destroy_process_groups() -> None:
    global _CPU_GROUP
    if dist.is_initialized():
        dist.destroy_process_group()
    _CPU_GROUP = None
    set_tp_info(DistributedInfo(0, 1))


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum x over the ranks, in place; every rank gets the same sum."""
    if get_tp_info().size > 1:
        dist.all_reduce(x)
    return x


def all_gather_last_dim(x: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's x along the last dimension, in rank order."""
    size = get_tp_info().size
    if size == 1:
        return x
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x)
    return torch.cat(parts, dim=-1)


def broadcast_object(obj: Any = None) -> Any:
    """Rank 0's `obj` on every rank (pickled over the CPU group); the other ranks pass nothing."""
    if get_tp_info().size == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=_CPU_GROUP)
    return box[0]


def min_across_ranks(value: int) -> int:
    """The smallest of every rank's value: sizes that must agree (the KV pool) take the tightest rank's."""
    if get_tp_info().size == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=_CPU_GROUP)
    return int(t.item())


def gather_objects(obj: Any) -> list[Any] | None:
    """Every rank's obj, in rank order, on rank 0 (None elsewhere)."""
    info = get_tp_info()
    if info.size == 1:
        return [obj]
    out = [None] * info.size if info.is_primary else None
    dist.gather_object(obj, out, dst=0, group=_CPU_GROUP)
    return out
