"""Chapter 29's test harness: one engine and its prefill or decode scheduler in a process of its own, driven command by
command over a pipe, so a test builds each side's state step by step (nothing depends on timing)."""

from __future__ import annotations

import multiprocessing as mp
import socket
import traceback

import torch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(conn, role: str, port: int, model: str, engine_args: dict, config: dict, peer_timeout_s: float) -> None:
    torch.set_num_threads(1)
    from minisgl.core import SamplingParams
    from minisgl.disagg import DecodeScheduler, KVChannel, PrefillScheduler
    from minisgl.engine import Engine, EngineConfig
    from minisgl.scheduler.config import SchedulerConfig
    from minisgl.scheduler.utils import PendingReq

    engine = Engine(EngineConfig(model, device="cpu", dtype="float32", **engine_args))
    channel = KVChannel(role, "127.0.0.1", port, peer_timeout_s=peer_timeout_s)
    cls = PrefillScheduler if role == "prefill" else DecodeScheduler
    sched = cls(engine, SchedulerConfig(overlap=False, **config), channel)
    conn.send(("ok", "ready"))

    def add(uid, ids, room, **params):
        sched.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32), SamplingParams(**params)), room)

    def run(most: int = 10_000):
        """Step until no batch can run (prefill: every prompt done; decode: every request whose KV is here done)."""
        for _ in range(most):
            if sched.step() is None:
                break
        return finished()

    def finished():
        return {uid: (req.output_ids, req.finish_reason) for uid, req in list(sched.finished.items())
                if sched.take_finished(uid)}

    def integrity():
        try:
            sched.check_integrity()
        except AssertionError as e:
            return str(e)
        return None

    commands = {"add": add, "run": run, "finished": finished, "integrity": integrity,
                "status": sched.status, "abort": sched.abort_request,
                "poll": lambda: sched.poll() if role == "prefill" else sched.receive(),
                "step": lambda: sched.step() is not None}
    while True:
        cmd, args, kwargs = conn.recv()
        if cmd == "exit":
            return
        try:
            conn.send(("ok", commands[cmd](*args, **kwargs)))
        except Exception as e:  # noqa: BLE001 - the test sees it
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class Side:
    """One side (prefill or decode) in its own process."""

    def __init__(self, role: str, port: int, model: str, engine_args: dict | None = None, config: dict | None = None,
                 peer_timeout_s: float = 30.0) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.role = role
        self.process = ctx.Process(target=_serve, args=(child, role, port, model, engine_args or {}, config or {},
                                                        peer_timeout_s), daemon=True)
        self.process.start()

    def ready(self, timeout: float = 180.0) -> None:
        if not self.conn.poll(timeout):
            raise TimeoutError(f"the {self.role} side did not start")
        status, value = self.conn.recv()
        assert status == "ok", value

    def __call__(self, cmd: str, *args, **kwargs):
        self.conn.send((cmd, args, kwargs))
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(f"{self.role} side, {cmd}: {value}")
        return value

    def try_call(self, cmd: str, *args, **kwargs) -> tuple[str, object]:
        self.conn.send((cmd, args, kwargs))
        return self.conn.recv()

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(("exit", (), {}))
            except (BrokenPipeError, OSError):
                pass
            self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)


def pair(model: str, engine_args: dict | None = None, config: dict | None = None,
         peer_timeout_s: float = 30.0) -> tuple[Side, Side]:
    port = free_port()
    prefill = Side("prefill", port, model, engine_args, config, peer_timeout_s)
    decode = Side("decode", port, model, engine_args, config, peer_timeout_s)
    prefill.ready()
    decode.ready()
    return prefill, decode
