"""The one test runner behind both judges: `python practice/judge.py` and the browser (Pyodide).

Pure Python, standard library only. The learner's code is loaded as the module `solution`, then the
problem's tests.py runs against it: every `test_*` function, in file order, each reported as passed or
failed with its assertion message. `EXAMPLES` in tests.py names the tests shown to the learner (Run);
Submit runs them all. Under CPython a per-test time limit interrupts infinite loops; in the browser
the page kills the whole worker instead (signals do not exist there).
"""

from __future__ import annotations

import signal
import sys
import time
import traceback
import types
from typing import Any

DEFAULT_TIME_LIMIT = 2.0  # seconds per test


class TestTimeout(Exception):
    pass


def load_module(name: str, source: str, filename: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def _message(exc: BaseException) -> str:
    if isinstance(exc, AssertionError):
        return str(exc) or "assertion failed"
    return f"{type(exc).__name__}: {exc}"


def _line_of(exc: BaseException, filename: str) -> int | None:
    """Line of tests.py where the failure surfaced (so the learner sees which check failed)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == filename:
            return frame.lineno
    return None


class _Limit:
    """Raise TestTimeout in the running test after `seconds` (CPython main thread only)."""

    def __init__(self, seconds: float | None) -> None:
        usable = seconds and hasattr(signal, "setitimer") and _in_main_thread()
        self.seconds = seconds if usable else None

    def __enter__(self) -> None:
        if self.seconds:
            def expire(signum: int, frame: Any) -> None:
                raise TestTimeout(f"time limit of {self.seconds:g} s exceeded (an infinite loop?)")

            self._previous = signal.signal(signal.SIGALRM, expire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: Any) -> None:
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run(solution_source: str, tests_source: str, examples_only: bool = False,
        time_limit: float | None = DEFAULT_TIME_LIMIT) -> dict:
    """Judge one submission. Returns {"ok", "error", "results": [{"name", "passed", "message", "line", "seconds"}]}."""
    try:
        with _Limit(time_limit):
            load_module("solution", solution_source, "solution.py")
    except BaseException as exc:  # noqa: BLE001 - any error in the learner's module is a verdict, not a crash
        return {"ok": False, "error": f"your code does not load: {_message(exc)}", "results": []}
    tests = load_module("problem_tests", tests_source, "tests.py")
    names = [n for n, f in vars(tests).items() if n.startswith("test_") and callable(f)]
    if examples_only:
        names = [n for n in names if n in getattr(tests, "EXAMPLES", ())]
    results = []
    for name in names:
        start = time.perf_counter()
        try:
            with _Limit(time_limit):
                getattr(tests, name)()
            passed, message, line = True, "", None
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            passed, message, line = False, _message(exc), _line_of(exc, "tests.py")
            if isinstance(exc, AssertionError) and not str(exc) and line:
                message = "failed: " + tests_source.splitlines()[line - 1].strip()  # show the check itself
        results.append({"name": name, "passed": passed, "message": message, "line": line,
                        "seconds": round(time.perf_counter() - start, 4)})
    return {"ok": bool(results) and all(r["passed"] for r in results), "error": "", "results": results}
