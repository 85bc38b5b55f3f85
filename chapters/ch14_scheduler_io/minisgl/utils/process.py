"""What every worker process does the same way: say why it died before it goes."""

from __future__ import annotations

import contextlib


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
