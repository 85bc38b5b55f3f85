"""`python -m minisgl.router --dp N --model PATH`: N servers of the model and sglang-router in front of them.

Data parallelism for serving: N copies of the engine, each a whole server (`python -m minisgl.server`) with its own
KV cache, and one router that sends each request to one of them. The servers start first, each on a free port of
127.0.0.1, with the CPU threads shared out between them; once all are healthy the router starts with their URLs,
and the launcher waits until it has registered every one (it asks each for /server_info, chapter 27's route) before
it says where it serves. Ctrl-C (or SIGTERM, or any of them exiting) stops the router, then the servers.

The router is an outside program (sglang-router, Rust, from PyPI); `--router` names the command that runs it
(`make serve DP=N` installs it into build/sglang-router and passes that). Every flag the launcher does not know
goes to each server.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from minisgl.server.local import LocalServer

POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
READY_TIMEOUT = 120.0  # seconds for the router to register every worker


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def threads_each(dp: int) -> int:
    """CPU threads for each of `dp` engines: $MINISGL_CPU_THREADS (the whole machine's share) split evenly."""
    total = int(os.environ.get("MINISGL_CPU_THREADS", "0") or 0) or os.cpu_count() or 1
    return max(1, total // dp)


class DataParallel:
    """The servers and the router, started by the constructor (blocking until the router has every worker) and
    stopped by stop() or by leaving a `with` block. Attributes: url (the router's), servers, router."""

    def __init__(self, model: str, dp: int, router: list[str], server_flags: list[str] = (), host: str = "127.0.0.1",
                 port: int = 8000, policy: str = "cache_aware", router_flags: list[str] = (), echo: bool = True) -> None:
        if dp < 1:
            raise ValueError(f"--dp must be >= 1, got {dp}")
        if policy not in POLICIES:
            raise ValueError(f"--policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.servers: list[LocalServer] = []
        self.router: subprocess.Popen | None = None
        env = os.environ | {"MINISGL_CPU_THREADS": str(threads_each(dp)), "OMP_NUM_THREADS": str(threads_each(dp))}
        try:
            self._start_servers(dp, model, server_flags, env, echo)
            port = port or free_port(host)
            self.url = f"http://{host}:{port}"
            command = [*router, "--host", host, "--port", str(port), "--worker-urls", *self.worker_urls,
                       "--policy", policy, "--prometheus-port", str(free_port(host)), "--log-level", "warn",
                       *router_flags]
            self.router = subprocess.Popen(command, start_new_session=True)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _start_servers(self, dp: int, model: str, flags: list[str], env: dict, echo: bool) -> None:
        """dp servers, loading their models side by side. If one fails (or Ctrl-C comes), the others still come up
        or fail first, and every one that came up is kept in self.servers, so that stop() stops it."""
        pool = ThreadPoolExecutor(dp)
        starting = [pool.submit(LocalServer, model, *flags, env=env, echo=echo) for _ in range(dp)]
        try:
            for future in starting:
                try:
                    self.servers.append(future.result())
                except Exception as e:
                    raise RuntimeError(f"a server did not start: {e}") from None
        finally:
            pool.shutdown(wait=True)
            if len(self.servers) < dp:
                self.servers = [f.result() for f in starting if f.exception() is None]

    @property
    def worker_urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.router.poll() is not None:
                raise RuntimeError(f"the router exited with code {self.router.returncode}")
            try:
                workers = get_json(self.url + "/workers")["workers"]
                if len(workers) == len(self.servers) and all(w["is_healthy"] for w in workers):
                    return
            except (OSError, ValueError, KeyError):
                pass  # not listening yet
            time.sleep(0.2)
        raise RuntimeError(f"the router did not register all {len(self.servers)} workers in {READY_TIMEOUT:.0f} s")

    def alive(self) -> bool:
        return (self.router is not None and self.router.poll() is None
                and all(s.proc.poll() is None for s in self.servers))

    def stop(self) -> None:
        """The router first (no request reaches a stopping server through it), then every server."""
        if self.router is not None and self.router.poll() is None:
            self.router.terminate()  # SIGTERM: it exits at once (SIGINT makes it print a traceback)
            try:
                self.router.wait(10)
            except subprocess.TimeoutExpired:
                self.router.kill()
                self.router.wait()
        for server in self.servers:
            server.stop()

    def __enter__(self) -> DataParallel:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m minisgl.router", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    p.add_argument("--model", required=True)
    p.add_argument("--dp", type=int, default=2, help="how many servers (default 2)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="the router's port (0: a free one)")
    p.add_argument("--policy", default="cache_aware", choices=POLICIES, help="the router's policy (default cache_aware)")
    p.add_argument("--router", default=os.environ.get("SGLANG_ROUTER", "sglang-router"),
                   help="the command that runs sglang-router (default $SGLANG_ROUTER, else sglang-router)")
    p.add_argument("--router-args", default="", help="more flags for the router, e.g. \"--cache-threshold 0.5\"")
    a, server_flags = p.parse_known_args(argv)

    def interrupt(*_) -> None:
        raise KeyboardInterrupt

    # Ctrl-C and SIGTERM both stop everything, set here because a process started in the background by a shell
    # inherits SIGINT ignored.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    print(f"starting {a.dp} servers of {a.model} and sglang-router ({a.policy}) ...", flush=True)
    try:
        with DataParallel(a.model, a.dp, shlex.split(a.router), server_flags, a.host, a.port, a.policy,
                          shlex.split(a.router_args)) as dp:
            print(f"serving {a.model} on {dp.url} through sglang-router ({a.policy}, {a.dp} workers: "
                  f"{' '.join(dp.worker_urls)}; Ctrl-C stops)", flush=True)
            while dp.alive():
                time.sleep(0.5)
            print("error: a server or the router exited; stopping the rest", flush=True)
            return 1
    except KeyboardInterrupt:
        pass
    except (RuntimeError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", flush=True)
        return 1
    print("stopped", flush=True)
    return 0
