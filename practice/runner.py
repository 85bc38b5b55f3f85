"""The one test runner behind both judges: `python practice/judge.py` and the browser (Pyodide).

Pure Python, standard library only. The learner's code is loaded as the module `solution`, then the
problem's tests.py runs against it: every `test_*` function, in file order, each reported as passed or
failed with its assertion message. `EXAMPLES` in tests.py names the tests shown to the learner (Run);
Submit runs them all. Under CPython a per-test time limit interrupts infinite loops; in the browser
the page kills the whole worker instead (signals do not exist there).

An exception that comes out of the learner's code is reported with the learner's own line (file, line
number, source line) as well as the tests.py line that called it; a NotImplementedError from the
learner's code says plainly that the starter is unchanged.
"""

from __future__ import annotations

import ast
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


class _Detail(str):
    """The message the judge gives a bare `assert a == b` that failed: what each side was."""


def _detail(op: str, left: Any, right: Any) -> _Detail:
    def show(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= 300 else text[:297] + "..."

    if op == "==":
        return _Detail(f"got {show(left)}, expected {show(right)}")
    return _Detail(f"left side {show(left)}, right side {show(right)}")


class _ShowOperands(ast.NodeTransformer):
    """`assert a == b` without a message becomes `assert (_l := a) == (_r := b), _detail("==", _l, _r)`:
    a failure then says what both sides were, and nothing is evaluated twice."""

    OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
           ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        test = node.test
        if node.msg is not None or not isinstance(test, ast.Compare) or len(test.ops) != 1:
            return node
        op = self.OPS.get(type(test.ops[0]))
        if op is None:
            return node
        left = ast.NamedExpr(ast.Name("_judge_left", ast.Store()), test.left)
        right = ast.NamedExpr(ast.Name("_judge_right", ast.Store()), test.comparators[0])
        msg = ast.Call(ast.Name("_judge_detail", ast.Load()),
                       [ast.Constant(op), ast.Name("_judge_left", ast.Load()), ast.Name("_judge_right", ast.Load())], [])
        new = ast.Assert(ast.Compare(left, test.ops, [right]), msg)
        return ast.fix_missing_locations(ast.copy_location(new, node))


def load_tests(source: str, filename: str = "tests.py") -> types.ModuleType:
    """tests.py as the module `problem_tests`, its bare comparisons rewritten to report both sides."""
    tree = _ShowOperands().visit(ast.parse(source, filename))
    module = types.ModuleType("problem_tests")
    module.__file__ = filename
    module.__dict__["_judge_detail"] = _detail
    sys.modules["problem_tests"] = module
    exec(compile(tree, filename, "exec"), module.__dict__)
    return module


SOLUTION_FILE = "solution.py"  # the file name the learner's code is compiled under (the browser shows it)


def _message(exc: BaseException) -> str:
    if isinstance(exc, AssertionError):
        return str(exc) or "assertion failed"
    text = exc.msg if isinstance(exc, SyntaxError) else str(exc)  # the line is reported apart
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _line_of(exc: BaseException, filename: str) -> int | None:
    """Line of tests.py where the failure surfaced (so the learner sees which check failed)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == filename:
            return frame.lineno
    return None


def _learner_frame(exc: BaseException, filename: str, source: str) -> dict | None:
    """The innermost frame of the learner's code in the traceback: {file, line, code, function}."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    if isinstance(exc, SyntaxError) and exc.filename == filename and exc.lineno:
        lineno, function = exc.lineno, None
    elif frames:
        lineno, function = frames[-1].lineno, frames[-1].name
    else:
        return None
    lines = source.splitlines()
    code = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
    return {"file": filename, "line": lineno, "code": code,
            "function": None if function in (None, "<module>") else function}


def _explain(exc: BaseException, frame: dict | None) -> str:
    """The verdict's message: a still-unimplemented starter is named as such."""
    if isinstance(exc, NotImplementedError) and frame is not None:
        name = f"{frame['function']}()" if frame["function"] else "your code"
        return f"your function {name} still raises NotImplementedError (starter unchanged)"
    return _message(exc)


def where(frame: dict | None) -> str:
    """`solution.py line 5: return a / b`, the learner's line as both judges print it."""
    if frame is None:
        return ""
    return f"{frame['file']} line {frame['line']}" + (f": {frame['code']}" if frame["code"] else "")


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
        time_limit: float | None = DEFAULT_TIME_LIMIT, solution_file: str = SOLUTION_FILE) -> dict:
    """Judge one submission.

    Returns {"ok", "error", "error_at", "results": [{"name", "passed", "message", "line", "at", "seconds"}]}:
    `line` is the tests.py line of a failure, `at` (or `error_at` when the code does not load) the learner's
    frame {file, line, code, function} when the exception came out of the learner's code, else None.
    """
    try:
        with _Limit(time_limit):
            load_module("solution", solution_source, solution_file)
    except BaseException as exc:  # noqa: BLE001 - any error in the learner's module is a verdict, not a crash
        at = _learner_frame(exc, solution_file, solution_source)
        error = f"your code does not load: {_message(exc)}" + (f" ({where(at)})" if at else "")
        return {"ok": False, "error": error, "error_at": at, "results": []}
    tests = load_tests(tests_source)
    names = [n for n, f in vars(tests).items() if n.startswith("test_") and callable(f)]
    if examples_only:
        names = [n for n in names if n in getattr(tests, "EXAMPLES", ())]
    results = [_run_one(tests, name, tests_source, solution_source, solution_file, time_limit) for name in names]
    return {"ok": bool(results) and all(r["passed"] for r in results), "error": "", "error_at": None,
            "results": results}


def _run_one(tests: types.ModuleType, name: str, tests_source: str, solution_source: str,
             solution_file: str, time_limit: float | None) -> dict:
    start = time.perf_counter()
    passed, message, line, at = True, "", None, None
    try:
        with _Limit(time_limit):
            getattr(tests, name)()
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        at = _learner_frame(exc, solution_file, solution_source)  # None when it surfaced in tests.py
        passed, message, line = False, _explain(exc, at), _line_of(exc, "tests.py")
        if isinstance(exc, AssertionError) and line and (not str(exc) or isinstance(exc.args[0], _Detail)):
            check = tests_source.splitlines()[line - 1].strip()  # show the check itself
            message = f"failed: {check}" + (f" ({exc.args[0]})" if exc.args else "")
    return {"name": name, "passed": passed, "message": message, "line": line, "at": at,
            "seconds": round(time.perf_counter() - start, 4)}
