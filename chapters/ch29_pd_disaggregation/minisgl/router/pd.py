"""`python -m minisgl.router.pd --model PATH`: a prefill server, a decode server, and sglang-router in
prefill/decode mode in front of them (chapter 29).

The two servers start side by side (each waits at start-up until the other has joined the KV channel: the prefill
server listens on its bootstrap port, the decode server connects to it), with the CPU threads shared between them.
Once both are healthy the router starts with `--pd-disaggregation --prefill URL BOOTSTRAP_PORT --decode URL`: it sends
every request to both, with bootstrap_host, bootstrap_port and bootstrap_room added, and answers with the decode
server's reply. Ctrl-C (or SIGTERM, or any of them exiting) stops the router, then the servers. Every flag the
launcher does not know goes to both servers.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from minisgl.router.launch import free_port, get_json, threads_each
from minisgl.server.local import LocalServer

READY_TIMEOUT = 120.0  # seconds for the router to register both servers


class PrefillDecode:
    """The prefill server, the decode server and the router, started by the constructor (blocking until the router has
    both) and stopped by stop() or by leaving a `with` block. Attributes: url (the router's), prefill, decode, router."""

    def __init__(self, model: str, router: list[str], server_flags: list[str] = (), host: str = "127.0.0.1",
                 port: int = 8000, bootstrap_port: int = 0, echo: bool = True, router_flags: list[str] = ()) -> None:
        self.prefill = self.decode = None
        self.router: subprocess.Popen | None = None
        self.bootstrap_port = bootstrap_port or free_port(host)
        env = os.environ | {"MINISGL_CPU_THREADS": str(threads_each(2)), "OMP_NUM_THREADS": str(threads_each(2))}
        pair = ["--disaggregation-bootstrap-port", str(self.bootstrap_port)]
        try:
            with ThreadPoolExecutor(2) as pool:
                prefill = pool.submit(LocalServer, model, *server_flags, "--disaggregation-mode", "prefill", *pair,
                                      env=env, echo=echo)
                decode = pool.submit(LocalServer, model, *server_flags, "--disaggregation-mode", "decode", *pair,
                                     "--disaggregation-bootstrap-host", host, env=env, echo=echo)
                self.prefill, self.decode = self._result(prefill, "prefill"), self._result(decode, "decode")
            port = port or free_port(host)
            self.url = f"http://{host}:{port}"
            command = [*router, "--host", host, "--port", str(port), "--pd-disaggregation",
                       "--prefill", self.prefill.url, str(self.bootstrap_port), "--decode", self.decode.url,
                       "--policy", "round_robin", "--prometheus-port", str(free_port(host)), "--log-level", "warn",
                       *router_flags]
            self.router = subprocess.Popen(command, start_new_session=True)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _result(self, future, role: str) -> LocalServer:
        try:
            return future.result()
        except Exception as e:
            raise RuntimeError(f"the {role} server did not start: {e}") from None

    @property
    def servers(self) -> list[LocalServer]:
        return [s for s in (self.prefill, self.decode) if s is not None]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.router.poll() is not None:
                raise RuntimeError(f"the router exited with code {self.router.returncode}")
            try:
                workers = get_json(self.url + "/workers")["workers"]
                if len(workers) == 2 and all(w["is_healthy"] for w in workers):
                    return
            except (OSError, ValueError, KeyError):
                pass  # not listening yet
            time.sleep(0.2)
        raise RuntimeError(f"the router did not register both servers in {READY_TIMEOUT:.0f} s")

    def alive(self) -> bool:
        return (self.router is not None and self.router.poll() is None
                and all(s.proc.poll() is None for s in self.servers))

    def stop(self) -> None:
        """The router first, then the decode server, then the prefill server (it hosts the bootstrap store)."""
        if self.router is not None and self.router.poll() is None:
            self.router.terminate()
            try:
                self.router.wait(10)
            except subprocess.TimeoutExpired:
                self.router.kill()
                self.router.wait()
        for server in (self.decode, self.prefill):
            if server is not None:
                server.stop()

    def __enter__(self) -> PrefillDecode:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m minisgl.router.pd", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="the router's port (0: a free one)")
    p.add_argument("--bootstrap-port", type=int, default=0, help="the prefill server's bootstrap port (0: a free one)")
    p.add_argument("--router", default=os.environ.get("SGLANG_ROUTER", "sglang-router"),
                   help="the command that runs sglang-router (default $SGLANG_ROUTER, else sglang-router)")
    a, server_flags = p.parse_known_args(argv)

    def interrupt(*_) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    print(f"starting a prefill and a decode server of {a.model} and sglang-router (prefill/decode mode) ...", flush=True)
    try:
        with PrefillDecode(a.model, shlex.split(a.router), server_flags, a.host, a.port, a.bootstrap_port) as pd:
            print(f"serving {a.model} on {pd.url} through sglang-router (prefill {pd.prefill.url}, bootstrap port "
                  f"{pd.bootstrap_port}; decode {pd.decode.url}; Ctrl-C stops)", flush=True)
            while pd.alive():
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


if __name__ == "__main__":
    raise SystemExit(main())
