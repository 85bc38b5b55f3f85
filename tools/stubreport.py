"""A pytest plugin that writes one JSON line per test: outcome, the stubs it exercises, and why it failed.

`make check` and the course integrity tests read it to tell, per TODO stub, done / failing / not started,
and to prove that a skeleton fails only because of its own stubs.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import traceback

import pytest

EXPLANATION_LINES = 6  # of pytest's assertion explanation ("E" lines) kept per failure


def pytest_addoption(parser):
    parser.addoption("--stub-report", default=None, help="write per-test results as JSON lines here")
    parser.addoption("--stub-entries", action="store_true",
                     help="record which stubs each test entered (its setup and call), for make check's blame")


def _chain(error: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during, outermost first."""
    chain: list[BaseException] = []
    while error is not None and all(error is not e for e in chain):
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _stub_in_chain(error: BaseException) -> BaseException | None:
    """A TODO stub's NotImplementedError that another exception wraps (Triton's interpreter re-raises what a
    kernel raised as its own InterpreterError, `from` the original)."""
    return next((e for e in _chain(error) if isinstance(e, NotImplementedError) and str(e).startswith("TODO(")), None)


# A stub that raised in another process (a server worker, the HTTP server) reaches the test as the text of an error:
# the worker reports its last error, the server answers 500 with it in the body.
REMOTE_STUB = re.compile(r"NotImplementedError: (TODO\(ch\d\d\): [\w.]+)")


def _remote_stub(error: BaseException) -> str | None:
    return next((m.group(1) for e in _chain(error) if (m := REMOTE_STUB.search(str(e)))), None)


def _frames(error: BaseException) -> list[str]:
    """Qualified names (`Req.complete_one`) of the functions the test called, in traceback order, the original
    error's last: where the failing code ran, so that a failure can name the stub it happened in."""
    names = []
    for exc in _chain(error):
        in_test = False
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            if os.path.basename(frame.f_code.co_filename).startswith(("test_", "conftest")):
                in_test = True  # frames above the test are pytest's own
                continue
            name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name).replace(".<locals>", "")
            if in_test or exc is not error:
                names.append(name)
    return names[-60:]


def _explanation(report) -> list[str]:
    """pytest's own explanation of the failure (its "E" lines), which says what differs, e.g. the dtypes.

    The "Full diff" of a comparison (what pytest prints in CI or with -v) is left out: it can push the line
    that names the difference, such as `and torch.float32 == torch.int32)`, past the lines kept."""
    kept, in_diff = [], False
    for line in str(report.longrepr).splitlines():
        if not line.startswith("E "):
            continue
        text = line[1:].strip()
        if text == "Full diff:":
            in_diff = True
            continue
        if in_diff and text[:1] in ("[", "{", "(", "-", "+", "?", "'", '"') and "where" not in text:
            continue  # a line of the diff; a line closing it ("] and ...") carries on the explanation
        in_diff = False
        if text:
            kept.append(text)
    return kept[:EXPLANATION_LINES]


def _short_reason(report) -> tuple[str, str]:
    """(exception type name, first line of the message) of a failed test."""
    excinfo = getattr(report, "_excinfo", None)
    if excinfo is not None:
        stub = _stub_in_chain(excinfo.value)
        if stub is not None:
            return "NotImplementedError", str(stub)
        if (remote := _remote_stub(excinfo.value)) is not None:
            return "NotImplementedError", remote
        message = str(excinfo.value).strip().splitlines()
        return excinfo.typename, message[0] if message else ""
    text = str(report.longrepr).strip().splitlines()
    return "Error", text[-1] if text else ""


class StubWatch:
    """Which of the session's stubs (every name its `stubs` marks give) a test entered, in this process, during its
    setup and call: what make check blames a failure on when its traceback names no stub. sys.monitoring (3.12+)
    reports each function's first call of a test and then nothing more from it; 3.11 has only sys.setprofile,
    which sees every call (and slows the suite down accordingly)."""

    TOOL = 2  # sys.monitoring.PROFILER_ID

    def __init__(self, names: set[str]) -> None:
        self.names, self.entered = names, set()
        self.monitoring = hasattr(sys, "monitoring")
        if self.monitoring:
            mon = sys.monitoring
            mon.use_tool_id(self.TOOL, "stubreport")
            mon.register_callback(self.TOOL, mon.events.PY_START, self._first_call)
            mon.set_events(self.TOOL, mon.events.PY_START)

    def _note(self, code) -> None:
        if code.co_qualname in self.names and not os.path.basename(code.co_filename).startswith(("test_", "conftest")):
            self.entered.add(code.co_qualname)

    def _first_call(self, code, offset):
        self._note(code)
        return sys.monitoring.DISABLE  # this function is known for this test: no more events from it

    def _profile(self, frame, event, arg) -> None:
        if event == "call":
            self._note(frame.f_code)

    def start(self) -> None:
        self.entered = set()
        if self.monitoring:
            sys.monitoring.restart_events()  # every function reports its first call again
        else:
            sys.setprofile(self._profile)
            threading.setprofile(self._profile)

    def stop(self) -> None:
        if not self.monitoring:
            sys.setprofile(None)
            threading.setprofile(None)

    def close(self) -> None:
        if self.monitoring:
            sys.monitoring.set_events(self.TOOL, 0)
            sys.monitoring.free_tool_id(self.TOOL)


_watch: StubWatch | None = None


def pytest_collection_finish(session):
    global _watch
    if session.config.getoption("--stub-entries") and session.items:
        names = {name for item in session.items for m in item.iter_markers("stubs") for name in m.args}
        _watch = StubWatch(names)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _watch is not None:
        _watch.start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    if _watch is not None:
        _watch.stop()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and report.failed:
        report._excinfo = call.excinfo
    marker = item.get_closest_marker("stubs")
    report._stubs = list(marker.args) if marker else []
    if _watch is not None:
        report._entered = sorted(_watch.entered)


def pytest_configure(config):
    path = config.getoption("--stub-report")
    if path:
        config._stub_report = open(path, "w")  # noqa: SIM115 - closed in pytest_unconfigure


def pytest_unconfigure(config):
    global _watch
    if _watch is not None:
        _watch.close()
        _watch = None
    handle = getattr(config, "_stub_report", None)
    if handle:
        handle.close()


def _write(config, record: dict) -> None:
    handle = getattr(config, "_stub_report", None)
    if handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()


def _skip_reason(report) -> str:
    text = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
    return text.removeprefix("Skipped: ")


_SETUP_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    # One record per test: its call, or the setup that failed or skipped it (a skip mark skips at setup), or a
    # teardown that failed.
    if report.when == "setup":
        _SETUP_SECONDS[report.nodeid] = report.duration
    if not (report.when == "call" or report.failed or (report.when == "setup" and report.skipped)):
        return
    seconds = report.duration + (_SETUP_SECONDS.get(report.nodeid, 0.0) if report.when == "call" else 0.0)
    record = {"test": report.nodeid, "when": report.when, "outcome": report.outcome,
              "stubs": getattr(report, "_stubs", []), "seconds": round(seconds, 2)}
    if hasattr(report, "_entered"):
        record["entered"] = report._entered
    if report.failed:
        record["error"], record["message"] = _short_reason(report)
        record["explanation"] = _explanation(report)
        excinfo = getattr(report, "_excinfo", None)
        record["frames"] = _frames(excinfo.value) if excinfo is not None else []
    if report.skipped:
        record["message"] = _skip_reason(report)
    _write(_config, record)


def pytest_collectreport(report):
    if report.failed:
        _write(_config, {"test": report.nodeid, "when": "collect", "outcome": "failed", "stubs": [],
                         "error": "CollectionError", "message": str(report.longrepr).strip().splitlines()[-1]})


_config = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    global _config
    _config = session.config
