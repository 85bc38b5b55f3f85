"""Tensor parallelism at the top: one process per rank, started and watched by the caller's process.

Every rank runs its own engine and scheduler on its slice of the model. Rank 0 receives each generate call's
requests from the caller, checks them and broadcasts them; every rank then schedules the same batches (the
scheduler is deterministic and the KV pools are the same size), so they meet at the same collectives. The
logits are gathered whole on every rank and sampled with the same seed: every rank picks the same token.
The caller's process watches every rank: one that dies takes the whole group down with an error, no hang.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from minisgl.distributed import (broadcast_object, destroy_process_groups, gather_objects, get_tp_info,
                                 init_process_groups, rendezvous_store, split_heads)
from minisgl.distributed.launch import rank_failure, root_cause, send_failure
from minisgl.engine import EngineConfig
from minisgl.env import ENV
from minisgl.models import ModelConfig

READY_TIMEOUT_S = 600.0  # loading a large model on every rank may take minutes
SHUTDOWN_GRACE_S = 5.0


def check_tp_config(tp_size: int, config: EngineConfig) -> None:
    """ValueError for a tensor-parallel setting that cannot work, before any process starts."""
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise ValueError(f"tp_size must be an integer >= 1, got {tp_size!r}")
    if tp_size == 1:
        return
    mc = ModelConfig.from_path(config.model_path)
    split_heads(mc.num_qo_heads, mc.num_kv_heads, tp_size)
    if mc.intermediate_size % tp_size:
        raise ValueError(f"intermediate_size {mc.intermediate_size} cannot be split evenly across tp_size {tp_size}")
    if config.device.startswith("cuda"):
        visible = torch.cuda.device_count()
        if tp_size > visible:
            raise ValueError(f"tp_size {tp_size} needs {tp_size} GPUs, but {visible} are visible")


def rank_device(device: str, rank: int) -> str:
    """Rank r uses GPU r; on the CPU all ranks share the cores."""
    return f"cuda:{rank}" if device.startswith("cuda") else "cpu"


def receive_work(llm: Any, conn: Connection | None) -> list | None:
    """The next generate call's checked requests, the same list on every rank; None means stop.

    Rank 0 reads (token ids, params) pairs from the caller; requests the scheduler refuses go back to the
    caller as ("refused", error) and are never broadcast, so the other ranks only ever see valid work.
    """
    # TODO(ch16): ranks other than 0 just take rank 0's broadcast. Rank 0 loops: receive a message from conn
    # (None: broadcast None and return it); turn it into pending requests with llm._pending, sending
    # ("refused", error) back on a ValueError and waiting for the next message; broadcast and return them.
    raise NotImplementedError("TODO(ch16): receive_work")


def rank_main(rank: int, size: int, store_port: int, llm_class: type, model_path: str, rank_args: dict, device: str,
              conn: Connection) -> None:
    """One rank's process: join the group, build the engine on this rank's slice, serve generate calls.

    conn leads to the caller: rank 0 receives work and returns results on it; every rank reports its error
    on it before exiting."""
    try:
        torch.set_num_threads(ENV.CPU_THREADS or max(1, torch.get_num_threads() // size))
        device = rank_device(device, rank)
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
        init_process_groups(rank, size, store_port, torch.device(device))
        llm = llm_class(model_path, **{**rank_args, "device": device})
        work = conn if rank == 0 else None
        if work is not None:
            work.send(("ready", None))
        while (pending := receive_work(llm, work)) is not None:
            outputs = llm._run(pending)
            everyone = gather_objects(outputs)
            if work is not None:
                same = all(o == outputs for o in everyone)
                work.send(("ok", outputs) if same else ("error", f"ranks sampled different tokens: {everyone}"))
        destroy_process_groups()
    except EOFError:  # the caller went away: nothing left to serve
        os._exit(1)
    except BaseException as error:
        send_failure(conn, error)
        os._exit(1)  # skip interpreter shutdown: a peer may still hold this rank in a collective


class TPGroup:
    """The rank processes of one LLM, seen from the caller: start, hand out work, watch, stop."""

    def __init__(self, size: int, llm_class: type, model_path: Any, rank_args: dict, device: str) -> None:
        spawn = mp.get_context("spawn")  # fork would copy this process's threads and CUDA state
        self._store = rendezvous_store()  # the ranks meet here; kept until shutdown
        self.processes, self._conns = [], []
        for rank in range(size):
            parent, child = spawn.Pipe()
            self.processes.append(spawn.Process(
                target=rank_main, name=f"minisgl-tp{rank}", daemon=True,
                args=(rank, size, self._store.port, llm_class, str(model_path), rank_args, device, child)))
            self.processes[-1].start()
            child.close()  # only the rank holds it now: its death closes the pipe
            self._conns.append(parent)
        self._closed = False
        self._wait(READY_TIMEOUT_S)

    def generate(self, requests: list) -> list[list[int]]:
        if self._closed:
            raise RuntimeError("this LLM's tensor-parallel group was shut down: create a new LLM")
        self._conns[0].send(requests)
        kind, value = self._wait(None)
        if kind == "refused":
            raise value
        if kind == "error":
            self.shutdown()
            raise RuntimeError(value)
        return value

    def _wait(self, timeout: float | None) -> tuple[str, Any]:
        """Rank 0's next message. As soon as any rank dies or reports an error: stop every rank and raise
        that rank's error (the first rank's in order, preferring errors that are not a broken collective)."""
        sentinels = [p.sentinel for p in self.processes]
        ready = wait([*self._conns, *sentinels], timeout)
        if not ready:
            self.shutdown()
            raise RuntimeError(f"the tensor-parallel ranks did not answer within {timeout} s")
        received = {}  # rank -> its message: rank 0's answer, or any rank's report of its error
        for rank in range(len(self._conns)):
            self._receive(rank, received)
            if rank == 0 and 0 in received and received[0][0] != "failed":
                return received[0]
        failures = []  # (error, whether the rank reported it, exit code)
        for rank, p in enumerate(self.processes):
            p.join(0.5)  # a rank that reported an error is exiting: let it finish
            if rank not in received:  # its report may have arrived while the others were read: it sends, then exits
                self._receive(rank, received)
            if rank in received or not p.is_alive():
                failures.append((rank_failure(rank, received.get(rank), p.exitcode), rank in received, p.exitcode))
        self.shutdown()
        raise root_cause(failures)

    def _receive(self, rank: int, received: dict) -> None:
        """Put rank's waiting message, if any, into received."""
        try:
            if self._conns[rank].poll():
                received[rank] = self._conns[rank].recv()
        except Exception:  # noqa: BLE001 - a closed pipe, or an error that cannot be unpickled here
            pass

    def shutdown(self) -> None:
        """Ask the ranks to stop, then stop whichever did not within SHUTDOWN_GRACE_S."""
        if self._closed:
            return
        self._closed = True
        if all(p.is_alive() for p in self.processes):  # a healthy group: let every rank leave cleanly
            try:
                self._conns[0].send(None)
                for p in self.processes:
                    p.join(SHUTDOWN_GRACE_S)
            except OSError:
                pass
        for p in self.processes:
            if p.is_alive():
                p.kill()
                p.join()
        for conn in self._conns:
            conn.close()
        self._store = None
