"""KVChannel: the link between one prefill engine (rank 0) and one decode engine (rank 1), made of torch.distributed's
parts, no protocol of our own.

- Bootstrap: the prefill side hosts a TCPStore at the bootstrap port; the decode side connects to it. A process group
  of two ranks is built on that store: gloo on the CPU, NCCL between two GPUs.
- Control: the prefill side posts transfer k's description (its room, its length, its first token) under key
  `xfer/k` in the store; the decode side reads them in order and counts what it received under `received`.
- Data: the KV of transfer k is one tensor, sent with `send` and received with `recv`. Both sides take the
  transfers in the same order k = 0, 1, 2, ...: NCCL matches sends to receives by order alone. `received` counts
  the transfers the decode side has taken, KV in place or announced as aborted: transfers 0 .. received-1 are done.
- Liveness: the decode side bumps `decode_beat` as its loop turns; a prefill side that sees it stand still for
  `peer_timeout_s` while it holds pages for transfers takes the decode engine for dead.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import torch
import torch.distributed as dist

ROLES = ("prefill", "decode")
BACKENDS = ("gloo", "nccl")


class KVChannel:
    def __init__(self, role: str, host: str, port: int, backend: str = "gloo", timeout_s: float = 120.0,
                 peer_timeout_s: float = 10.0) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.role, self.backend, self.peer_timeout_s = role, backend, peer_timeout_s
        self.rank = ROLES.index(role)
        timeout = timedelta(seconds=timeout_s)
        # The prefill side listens; the decode side waits for it (up to timeout_s) and connects.
        self.store = dist.TCPStore(host, port, 2, self.rank == 0, timeout=timeout)
        group_store = dist.PrefixStore("group", self.store)  # the group's own keys, apart from ours
        if backend == "gloo":
            self.group = dist.ProcessGroupGloo(group_store, self.rank, 2, timeout)
        else:
            self.group = dist.ProcessGroupNCCL(group_store, self.rank, 2)
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        self._beat, self._beat_seen_at = -1, time.monotonic()

    # --- control, through the store ---------------------------------------------------------------------------
    def post(self, k: int, meta: dict) -> None:
        """Describe transfer k (prefill side)."""
        self.store.set(f"xfer/{k}", json.dumps(meta))

    def meta(self, k: int, wait_s: float = 0.0) -> dict | None:
        """Transfer k's description if the prefill side has posted it (looking again once after wait_s), else None
        (decode side). (The store's own wait logs a warning at every timeout: a loop that polls would flood.)"""
        key = f"xfer/{k}"
        if not self.store.check([key]):
            if wait_s <= 0:
                return None
            time.sleep(wait_s)
            if not self.store.check([key]):
                return None
        return json.loads(self.store.get(key))

    def confirm(self) -> None:
        """One more transfer taken: its KV in place (or dropped), or its abort heard (decode side)."""
        self.store.add("received", 1)

    def received(self) -> int:
        """How many transfers the decode side has confirmed (prefill side)."""
        return self.store.add("received", 0)

    def beat(self) -> None:
        self.store.add("decode_beat", 1)

    def peer_alive(self) -> bool:
        """False once the decode side's beat has stood still for peer_timeout_s (prefill side)."""
        beat, now = self.store.add("decode_beat", 0), time.monotonic()
        if beat != self._beat:
            self._beat, self._beat_seen_at = beat, now
        return now - self._beat_seen_at < self.peer_timeout_s

    # --- data, through the process group ----------------------------------------------------------------------
    def send(self, kv: torch.Tensor):
        """Start sending one transfer's KV to the decode side; returns the work (the buffer must live until it
        completes). RuntimeError if the decode side is gone."""
        return self.group.send([kv.to(self.device).contiguous()], 1, 0)

    def recv(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Receive the next transfer's KV (decode side): blocks until it has arrived."""
        buf = torch.empty(shape, dtype=dtype, device=self.device)
        self.group.recv([buf], 0, 0).wait()
        return buf
