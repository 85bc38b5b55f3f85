"""What every worker process does the same way: say why it died before it goes; a profile when asked for."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path


def report_death(name: str, events) -> contextlib.AbstractContextManager:
    """Run a worker's body under this: an exception that ends the worker is reported on `events` first, so that
    the front end can say why the worker died (its traceback goes to the worker's stderr as usual)."""

    @contextlib.contextmanager
    def reporting():
        try:
            yield
        except BaseException as e:
            if events is not None and not isinstance(e, (KeyboardInterrupt, SystemExit)):
                events.put({"worker": name, "died": f"{type(e).__name__}: {e}"})
            raise

    return reporting()


@contextlib.contextmanager
def profiled(name: str):
    """With MINISGL_PROFILE_DIR set, run the body under cProfile and write DIR/<name>.prof when it ends (also on
    the SIGTERM that stops a worker): where each process of a server spends its time (chapter 22's bench-serve
    --profile-dir reads them). Without it, nothing happens."""
    folder = os.environ.get("MINISGL_PROFILE_DIR")
    if not folder:
        yield
        return
    import cProfile

    profile = cProfile.Profile()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a worker stopped by SIGTERM still writes its profile
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        Path(folder).mkdir(parents=True, exist_ok=True)
        profile.dump_stats(Path(folder) / f"{name}.prof")
