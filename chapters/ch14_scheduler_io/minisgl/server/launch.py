"""Starting and stopping the worker processes of a server: the scheduler and the tokenizer/detokenizer.

The process that creates `Workers` is the front end: it sends TokenizeMsg/AbortMsg to the tokenizer process and
receives UserReply/ErrorReply/StatusReply from it. The queues are ZMQ sockets on `ipc://` files in a private
temporary folder. Workers report ready (or why they could not start) on a multiprocessing queue; a worker that
dies is noticed by `dead_worker()`, and `stop()` always leaves no process behind.

Each worker runs in a process group of its own: a signal sent to the front end's group (Ctrl-C in a terminal, a
supervisor's SIGTERM to the group) reaches the front end only, which then stops the workers in order, instead of
killing them under it (a worker killed so would look like a crash).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from minisgl.message import BaseBackendMsg, BaseFrontendMsg, BaseTokenizerMsg, ExitMsg
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.io import run_scheduler
from minisgl.tokenizer.server import tokenize_worker
from minisgl.utils.mp import ZmqPullQueue, ZmqPushQueue
from minisgl.utils.process import profiled


@dataclass(frozen=True)
class Addresses:
    backend: str  # the scheduler receives here
    tokenizer: str  # the tokenizer process receives here
    frontend: str  # the front end receives here

    @classmethod
    def in_folder(cls, folder: Path) -> Addresses:
        return cls(*(f"ipc://{folder / name}" for name in ("backend", "tokenizer", "frontend")))


def _in_own_group(name: str, target, *args) -> None:
    """A worker's entry point: leave the parent's process group, take the worker's name (`ps`, `top` and a profiler
    then tell the two apart: minisgl-scheduler, minisgl-tokenizer, cut to the kernel's 15 characters), then run the
    worker."""
    os.setpgid(0, 0)
    with contextlib.suppress(OSError):  # Linux only
        Path("/proc/self/comm").write_text(f"minisgl-{name}"[:15])
    with profiled(name):
        target(*args)


class WorkerError(RuntimeError):
    """A worker could not start, or died."""


class Workers:
    """The two worker processes of one server and the front end's ends of the queues.

    engine_args go to EngineConfig, scheduler_config to the Scheduler (None: its defaults). The constructor
    returns once both workers are ready (WorkerError if one fails to start); then `max_seq_len` is the engine's
    limit on prompt + output tokens, `total_slots` the KV pool's size in tokens (`page_size` each page's),
    `max_running_reqs` how many requests can run at once."""

    def __init__(self, model_path: str, engine_args: dict | None = None,
                 scheduler_config: SchedulerConfig | None = None, startup_timeout: float = 600.0) -> None:
        if scheduler_config is not None and not isinstance(scheduler_config, SchedulerConfig):
            raise ValueError(f"scheduler_config must be a SchedulerConfig, got {type(scheduler_config).__name__}")
        self.folder = Path(tempfile.mkdtemp(prefix="minisgl-"))
        self.addrs = Addresses.in_folder(self.folder)
        context = mp.get_context("spawn")  # a fresh interpreter: no CUDA state or threads inherited
        self._ready = context.Queue()
        self.processes: dict[str, mp.Process] = {}
        self.to_tokenizer = self.to_scheduler = self.replies = None
        try:
            # The front end binds its own socket first: replies sent before it listens are never lost.
            self.replies = ZmqPullQueue(self.addrs.frontend, create=True, decoder=BaseFrontendMsg.decoder)
            self._start(context, "scheduler", run_scheduler,
                        (str(model_path), engine_args or {}, scheduler_config, self.addrs.backend,
                         self.addrs.tokenizer, self._ready))
            info = self._wait_ready("scheduler", startup_timeout)
            self.max_seq_len: int = info["max_seq_len"]
            self.total_slots: int = info["total_slots"]
            self.page_size: int = info["page_size"]
            self.max_running_reqs: int = info["max_running_reqs"]
            self._start(context, "tokenizer", tokenize_worker,
                        (str(model_path), self.max_seq_len, info["vocab_size"], self.addrs.tokenizer,
                         self.addrs.backend, self.addrs.frontend, self._ready))
            self._wait_ready("tokenizer", startup_timeout)
            self.to_tokenizer = ZmqPushQueue(self.addrs.tokenizer, create=False, encoder=BaseTokenizerMsg.encoder)
            # Status queries go straight to the scheduler: there is nothing to tokenize in them.
            self.to_scheduler = ZmqPushQueue(self.addrs.backend, create=False, encoder=BaseBackendMsg.encoder)
        except BaseException:
            self.stop()
            raise

    def _start(self, context, name: str, target, args: tuple) -> None:
        process = context.Process(target=_in_own_group, args=(name, target, *args), name=f"minisgl-{name}",
                                  daemon=True)
        process.start()
        self.processes[name] = process

    def _wait_ready(self, name: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = self._ready.get(timeout=0.2)
            except queue.Empty:
                if not self.processes[name].is_alive():
                    raise WorkerError(f"the {name} process exited while starting "
                                      f"(exit code {self.processes[name].exitcode})") from None
                continue
            if "died" in info:
                raise WorkerError(f"the {name} process could not start: {info['died']}")
            return info
        raise WorkerError(f"the {name} process was not ready after {timeout:.0f} s")

    def dead_worker(self) -> str | None:
        """A message naming a worker that is no longer running (with the error that ended it, when it could say),
        or None while all run."""
        for name, process in self.processes.items():
            if not process.is_alive():
                process.join()
                why = self._last_words(name)
                return f"the {name} process died (exit code {process.exitcode}){': ' + why if why else ''}"
        return None

    def _last_words(self, name: str) -> str:
        """The error a worker reported before it died (see minisgl.utils.process.report_death), if it did."""
        while True:
            try:
                info = self._ready.get(timeout=0.5)
            except queue.Empty:
                return ""
            if info.get("worker") == name and "died" in info:
                return info["died"]

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both workers (an ExitMsg to the scheduler, then SIGTERM, then SIGKILL) and remove the sockets.
        Safe to call twice, and on a half-started set."""
        scheduler = self.processes.get("scheduler")
        if self.to_scheduler is not None and scheduler is not None:
            self.to_scheduler.put(ExitMsg())  # it leaves its loop between two steps
            scheduler.join(timeout)
        for process in self.processes.values():  # the tokenizer holds nothing worth a clean exit
            if process.is_alive():
                process.terminate()
                process.join(2.0)
            if process.is_alive():
                process.kill()
                process.join()
        for q in (self.to_tokenizer, self.to_scheduler, self.replies):
            if q is not None:
                q.stop()
        self.to_tokenizer = self.to_scheduler = self.replies = None
        self.processes.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
