"""A pytest plugin that writes one JSON line per test: outcome, the stubs it exercises, and why it failed.

`make check` and the course integrity tests read it to tell, per TODO stub, done / failing / not started,
and to prove that a skeleton fails only because of its own stubs.
"""

from __future__ import annotations

import json
import os
import re
import traceback

import pytest

EXPLANATION_LINES = 6  # of pytest's assertion explanation ("E" lines) kept per failure


def pytest_addoption(parser):
    parser.addoption("--stub-report", default=None, help="write per-test results as JSON lines here")


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and report.failed:
        report._excinfo = call.excinfo
    marker = item.get_closest_marker("stubs")
    report._stubs = list(marker.args) if marker else []


def pytest_configure(config):
    path = config.getoption("--stub-report")
    if path:
        config._stub_report = open(path, "w")  # noqa: SIM115 - closed in pytest_unconfigure


def pytest_unconfigure(config):
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
