"""A warm Python for the many short processes of `make test`: import torch and transformers once, fork per job.

`make test` runs about a hundred Python processes (a chapter's suite on each of three trees, every chapter's
main.py), and each used to spend some 10 s of CPU importing torch and transformers before its first test:
`from transformers import AutoTokenizer` alone takes 9 s on the course's 2-core machine. This server imports
them once; every job is a fork of it that takes on its own environment (its tree first on sys.path, its
variables, its working directory and output files) and runs `python -m module` or `python script.py` as a
fresh interpreter would, with those libraries already in memory. The server never imports `minisgl`, so each
job imports the copy of its own tree.

    server = Preforker()                  # starts `python -m tools.prefork`, which preloads
    code = server.run(["-m", "pytest", ...], env, cwd, stdout_path, stderr_path)
    server.close()

A job's processes (servers, tensor-parallel ranks) are started by the job as usual; they do not come from here.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import subprocess
import sys
import threading
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What nearly every job imports: the heavy libraries, nothing of the course's own trees.
# (pytest's plugins are left out: pytest rewrites their asserts when it loads them, which it cannot do to a module
# imported before it.)
PRELOAD = ("numpy", "torch", "safetensors.torch", "transformers", "tokenizers", "jinja2", "tqdm", "pytest")
PRELOAD_FROM_TRANSFORMERS = ("AutoTokenizer", "AutoModelForCausalLM", "AutoConfig", "PreTrainedTokenizerFast")


class Preforker:
    """The client side: one server process, jobs run one at a time (the caller waits for each)."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MINISGL_PREFORK")}
        self.proc = subprocess.Popen([sys.executable, "-m", "tools.prefork"], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        atexit.register(self.close)

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, stdout: Path, stderr: Path) -> int:
        """Exit code of `python *argv` run with this environment, its output written to the two files."""
        job = {"argv": argv, "env": env, "cwd": str(cwd), "stdout": str(stdout), "stderr": str(stderr)}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the pre-forking server exited with code {self.proc.wait()}")
        return json.loads(line)["code"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # a job that needs it fails on its own, with its own message
    import transformers

    for name in PRELOAD_FROM_TRANSFORMERS:
        getattr(transformers, name)  # transformers imports lazily: touch each name to import it now


def _sys_path(argv: list[str], env: dict[str, str], cwd: str) -> list[str]:
    """sys.path as `python *argv` would start with under env: the script's folder (or, for -m, the working
    directory), then PYTHONPATH, then this interpreter's own (standard library, site-packages)."""
    first = cwd if argv[0] == "-m" else os.path.dirname(os.path.abspath(os.path.join(cwd, argv[0])))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [first, *extra, *_BASE_PATH]


def _set_threads(env: dict[str, str]) -> None:
    """torch read OMP_NUM_THREADS when the server imported it: give the job the thread count its own variable asks
    for, as a fresh process would take it (more threads than free cores is the slowest choice of all)."""
    import torch

    count = env.get("OMP_NUM_THREADS", "")
    torch.set_num_threads(int(count) if count.isdigit() and int(count) > 0 else _DEFAULT_THREADS)


def _forget_triton() -> None:
    """Triton decides at import whether its kernels run in its CPU interpreter (TRITON_INTERPRET, which the course's
    CPU tests and examples set first thing), and the server imported it with transformers. So the job imports its
    own: its Python modules are dropped here (its compiled extension, triton._C, cannot be imported twice and
    reads no setting)."""
    for name in [m for m in sys.modules if (m == "triton" or m.startswith("triton.")) and not m.startswith("triton._C")]:
        del sys.modules[name]


def _child(job: dict) -> None:
    """Become the job, then exit with its code (never returns)."""
    code = 1
    try:
        for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        env, argv = job["env"], job["argv"]
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(env)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the process exits below
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
        sys.path[:] = _sys_path(argv, env, job["cwd"])
        _set_threads(env)
        _forget_triton()
        try:
            if argv[0] == "-m":
                sys.argv = ["-m", *argv[2:]]  # runpy puts the module's file in sys.argv[0]
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(argv)
                runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException:  # what an uncaught exception does to a process: the traceback, exit code 1
            traceback.print_exc()
            code = 1
        threading._shutdown()  # as at interpreter exit: wait for the job's non-daemon threads
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        os._exit(code)


def serve() -> None:
    """Read one JSON job per line on stdin; answer each with its exit code on stdout once it has ended."""
    global _BASE_PATH, _DEFAULT_THREADS
    _preload()
    import torch

    _DEFAULT_THREADS = torch.get_num_threads()
    _BASE_PATH = [p for p in sys.path[1:] if p]  # sys.path[0] is this server's working directory
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(job)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


_BASE_PATH: list[str] = []
_DEFAULT_THREADS = 1

if __name__ == "__main__":
    serve()
