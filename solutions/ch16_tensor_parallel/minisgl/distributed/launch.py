"""Start one process per rank and bring their errors home.

A rank that raises sends its exception (and traceback) to the parent before it exits, so the parent raises the
same error the rank hit. A rank that dies without a word (killed) is reported by its exit code.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

import torch

from minisgl.distributed.comm import destroy_process_groups, init_process_groups, rendezvous_store


def send_failure(conn: Connection, error: BaseException) -> None:
    """Tell the parent why this rank is about to exit (the exception itself when it can be pickled)."""
    text = traceback.format_exc()
    try:
        payload = pickle.dumps(("failed", (error, text)))
        pickle.loads(payload)  # some exceptions pickle but cannot be rebuilt (torch.distributed's among them)
    except Exception:  # noqa: BLE001 - then it travels as its text
        payload = pickle.dumps(("failed", (RuntimeError(f"{type(error).__name__}: {error}"), text)))
    conn.send_bytes(payload)


def rank_failure(rank: int, message: tuple | None, exitcode: int | None) -> BaseException:
    """The error to raise in the parent for a rank that died: its own exception, or one naming its exit code."""
    if message is not None and message[0] == "failed":
        error, text = message[1]
        error.add_note(f"(raised in tensor-parallel rank {rank}; its traceback:)\n{text}")
        return error
    how = f"was killed by signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exit code {exitcode}"
    return RuntimeError(f"tensor-parallel rank {rank} died ({how}) without reporting an error; "
                        "the other ranks were stopped")


def _rank_entry(rank: int, size: int, store_port: int, device: str, fn: Callable, args: tuple,
                conn: Connection) -> None:
    try:
        torch.set_num_threads(1)
        init_process_groups(rank, size, store_port, torch.device(device))
        # Plain pickle: a tensor travels by value. Torch's own reducer (what conn.send uses) passes a file
        # descriptor that the parent fetches from this process, which may have exited by then.
        conn.send_bytes(pickle.dumps(("ok", fn(*args))))
        destroy_process_groups()
    except BaseException as error:
        send_failure(conn, error)
        os._exit(1)


def run_on_ranks(fn: Callable, size: int, args: tuple = (), device: str = "cpu", timeout: float = 300.0) -> list:
    """fn(*args) on `size` spawned ranks of one group (device: "cpu" for gloo; "cuda" puts rank r on GPU r,
    NCCL). Every rank's return value, in rank order. The first rank error is raised here."""
    spawn = mp.get_context("spawn")
    store, pipes, procs = rendezvous_store(), [], []  # lives until every rank is done
    for rank in range(size):
        parent, child = spawn.Pipe(duplex=False)
        rank_device = f"cuda:{rank}" if device.startswith("cuda") else device
        procs.append(spawn.Process(target=_rank_entry, daemon=True,
                                   args=(rank, size, store.port, rank_device, fn, args, child)))
        procs[-1].start()
        child.close()
        pipes.append(parent)
    results: dict[int, Any] = {}
    try:
        while len(results) < size:
            ready = wait([p for r, p in enumerate(pipes) if r not in results], timeout)
            if not ready:
                raise TimeoutError(f"the ranks did not finish within {timeout} s")
            for conn in ready:
                rank = pipes.index(conn)
                try:
                    message = conn.recv()
                except EOFError:
                    message = None
                if message is None or message[0] != "ok":
                    procs[rank].join(5)
                    raise rank_failure(rank, message, procs[rank].exitcode)
                results[rank] = message[1]
    finally:
        for p in procs:
            p.join(5 if not p.is_alive() or len(results) == size else 0)
            if p.is_alive():
                p.kill()
                p.join()
    return [results[r] for r in range(size)]
