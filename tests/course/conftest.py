"""Maintainers' suites (make test): course integrity, docs, practice. They run chapter suites in subprocesses.

The built book and its local server are session fixtures: the docs-site and browser-judge tests share one build
(they run in one xdist worker, group "site", with make test's --dist loadgroup)."""

import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The chapter suites and examples these tests run start from one warm interpreter (tools/prefork.py): each saves
# the ~10 s of CPU that importing torch and transformers costs a fresh process. MINISGL_PREFORK=0 turns it off.
os.environ.setdefault("MINISGL_PREFORK", "1")


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """`mkdocs build --strict` of the whole book, both languages, once per test session."""
    _one_worker_builds_the_site()
    site = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return site


def _one_worker_builds_the_site() -> None:
    """Under xdist, fail if a second worker of the same run builds the book: the "site" group was split (pytest
    9.2 with pytest-xdist 3.8 ignores xdist_group under --dist loadgroup), and every worker would pay the build."""
    run, worker = os.environ.get("PYTEST_XDIST_TESTRUNUID"), os.environ.get("PYTEST_XDIST_WORKER")
    if not run or not worker:
        return
    marks = ROOT / "build" / "site-builders"
    marks.mkdir(parents=True, exist_ok=True)
    (marks / f"{run}-{worker}").touch()
    others = sorted(p.name.rsplit("-", 1)[1] for p in marks.glob(f"{run}-*") if p.name != f"{run}-{worker}")
    assert not others, (f"the book is built by xdist workers {others} and {worker} in one run: the 'site' group was "
                        "split (check pytest / pytest-xdist versions against requirements.txt)")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002
        pass


@pytest.fixture(scope="session")
def site_server(built_site: Path):
    """The built site over HTTP on 127.0.0.1 (a free port the system picks)."""
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
