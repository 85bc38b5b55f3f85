"""Start one process per rank and bring their errors home.

A rank that raises sends its exception (and traceback) to the parent before it exits, so the parent raises the
same error the rank hit. A rank that dies without a word (killed) is reported by its exit code. When one rank fails,
its peers usually fail a moment later in a collective it left; the parent raises the failed rank's own error,
not the broken collectives its peers report.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import time
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

import torch

from minisgl.distributed.comm import destroy_process_groups, init_process_groups, rendezvous_store

PEER_REPORT_GRACE_S = 2.0  # after a failure, how long the other ranks get to send their own reports


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


def root_cause(failures: list[tuple[BaseException, bool, int | None]]) -> BaseException:
    """The error worth showing among (error, reported by the rank, exit code) of the failed ranks: a rank's own
    error first, then a rank killed by a signal, and only then the broken collectives its peers saw."""
    broken = (RuntimeError, torch.distributed.DistError)  # what a peer's death looks like to the others
    own = [e for e, reported, _ in failures if reported and not isinstance(e, broken)]
    killed = [e for e, reported, code in failures if not reported and code is not None and code < 0]
    rest = [e for e, _, _ in failures] or [RuntimeError("a tensor-parallel rank failed")]
    return (own or killed or rest)[0]


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
    NCCL). Every rank's return value, in rank order. A failure raises its root cause (root_cause)."""
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
            for conn in sorted(ready, key=pipes.index):
                rank = pipes.index(conn)
                message = _receive(conn)
                if message is None or message[0] != "ok":
                    raise _failure_of_group(rank, message, procs, pipes, results)
                results[rank] = message[1]
    finally:
        for p in procs:
            p.join(5 if not p.is_alive() or len(results) == size else 0)
            if p.is_alive():
                p.kill()
                p.join()
    return [results[r] for r in range(size)]


def _receive(conn: Connection) -> tuple | None:
    try:
        return conn.recv()
    except EOFError:  # the rank died without a word
        return None


def _failure_of_group(rank: int, message: tuple | None, procs: list, pipes: list[Connection],
                      results: dict[int, Any]) -> BaseException:
    """Rank `rank` failed: read what the other ranks report within PEER_REPORT_GRACE_S (a peer that lost it in
    a collective says so at once) and return the root cause among every failure, not the first one read."""
    messages = {rank: message}
    deadline = time.monotonic() + PEER_REPORT_GRACE_S
    for other, conn in enumerate(pipes):
        if other not in results and other != rank and conn.poll(max(0.0, deadline - time.monotonic())):
            messages[other] = _receive(conn)
    failures = []
    for r, m in sorted(messages.items()):
        if m is None or m[0] != "ok":
            procs[r].join(1)
            failures.append((rank_failure(r, m, procs[r].exitcode), m is not None, procs[r].exitcode))
    return root_cause(failures)
