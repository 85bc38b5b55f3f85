"""`python -m minisgl.server` run by a script or a test: a process of its own on a free port of 127.0.0.1.

    with LocalServer("models/smollm2", "--max-seq-len", "512") as server:
        httpx.get(server.url + "/v1/models")

The server is started with `--port 0`: it binds a port the system picks, keeps it, and names it in its
"serving ... on http://127.0.0.1:PORT" line (a port chosen here and handed on could be taken by another process
before the server binds it). Starting waits for that line and until /health answers 200; if the server exits
first, or is not up in time, a RuntimeError names the exit code or the deadline and shows the server's last lines.
Stopping sends a signal (SIGINT, as Ctrl-C does: the server stops its own workers), waits, and kills whatever is
left: the server's child processes are recorded once it is up, so a worker that outlives the server is found too
(`left_behind` lists them).

It imports nothing from minisgl (psutil and the standard library only), so a test that does not import the engine
can load it by path.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

TAIL_LINES = 40  # the server's last lines kept, for the error message of a failed start
SERVING = re.compile(r"serving .* on http://\S+:(\d+) ")  # the line the server prints once it listens


def running(process: psutil.Process) -> bool:
    """Alive and not a zombie (an exited process whose parent, maybe init, has not collected it yet)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class LocalServer:
    """The server on `model` with extra command-line `flags`, started by the constructor (blocking until it is
    healthy) and stopped by `stop()` or by leaving a `with` block. Attributes: `url`, `port`, `proc`, `command`,
    `children` (its worker processes, once up); after `stop()`, `exit_code` and `left_behind`. With echo=True
    (default) the server's output is copied to this process's stdout as it comes; `tail()` returns its last lines
    in either case."""

    def __init__(self, model: str | Path, *flags: str, env: dict[str, str] | None = None,
                 start_timeout: float = 180.0, echo: bool = True) -> None:
        self.port: int | None = None  # known once the server says where it listens
        self.url = ""
        self._listening = threading.Event()
        self.command = [sys.executable, "-m", "minisgl.server", "--model", str(model), "--host", "127.0.0.1",
                        "--port", "0", *flags]
        self.exit_code: int | None = None
        self.left_behind: list[int] | None = None
        self.children: list[psutil.Process] = []
        self._lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.proc = subprocess.Popen(self.command, env=(os.environ if env is None else env) | {"PYTHONUNBUFFERED": "1"},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                     start_new_session=True)  # a Ctrl-C in the terminal is ours: stop() passes it on
        self._reader = threading.Thread(target=self._read_output, args=(echo,), daemon=True)
        self._reader.start()
        try:
            self._wait_healthy(start_timeout)
        except BaseException:
            self.stop(signal.SIGKILL)
            raise
        self.children = self._current_children()  # listed now: once the server has died they cannot be asked for

    def _read_output(self, echo: bool) -> None:
        # A pipe nobody reads fills up and blocks the server, so this thread reads it to the end.
        for line in self.proc.stdout:
            self._lines.append(line.rstrip("\n"))
            if not self._listening.is_set() and (m := SERVING.match(line)):
                self.port, self.url = int(m.group(1)), f"http://127.0.0.1:{m.group(1)}"
                self._listening.set()
            if echo:
                try:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                except (ValueError, OSError):  # this process's stdout was closed (a test run that ended)
                    echo = False

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                self._reader.join(5)  # the last lines, a traceback most likely
                raise RuntimeError(f"the server exited with code {self.proc.returncode} while starting; "
                                   f"its last lines:\n{self.tail()}")
            if self._listening.is_set() and self.healthy():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server was not healthy after {timeout:.0f} s; its last lines:\n{self.tail()}")
            time.sleep(0.2)

    def healthy(self) -> bool:
        """Whether /health answers 200 now."""
        if not self.url:
            return False
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def tail(self, n: int = TAIL_LINES) -> str:
        """The last n lines the server printed (stdout and stderr together)."""
        return "\n".join(list(self._lines)[-n:])

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0, grace: float = 10.0, group: bool = False) -> int:
        """Send `sig` (unless the server has exited already; with group=True to the server's whole process group, as
        a terminal or a supervisor does), wait up to `timeout` s for the server, then up to `grace` s for its
        workers; kill what is still alive. Returns the server's exit code. Calling it again is harmless."""
        workers = {p.pid: p for p in self.children + self._current_children()}.values()
        if self.proc.poll() is None:
            if group:
                os.killpg(self.proc.pid, sig)  # its own session: the group's id is its pid
            else:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        deadline = time.monotonic() + grace
        while (alive := [p for p in workers if running(p)]) and time.monotonic() < deadline:  # on their way out
            time.sleep(0.05)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        if self.left_behind is None:  # a second call does not hide what the first one found
            self.left_behind = [p.pid for p in alive]
        self._reader.join(5)
        self.exit_code = self.proc.returncode
        return self.exit_code

    def _current_children(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
