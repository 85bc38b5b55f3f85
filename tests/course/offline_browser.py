"""Headless Chromium with the network cut off, shared by the book's browser tests.

`offline_page()` yields a page in which every request to a host other than 127.0.0.1 is aborted; when the
block ends it fails the test on any blocked request, failed request or JavaScript error. It skips (with
the reason) where the Debian `chromium` package or the `playwright` Python package is missing; playwright
drives the system browser and never downloads one.

`no_search_docs=site` serves the site's search index without its documents: mkdocs-material's search worker
builds a lunr index of the whole book (5 MB of JSON, both languages) on every page load, most of a page's CPU
time on a small machine. Tests that do not search pass it; the search test loads the real index.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import urlsplit

import pytest


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None


@contextmanager
def offline_page(viewport: dict, init_script: str | None = None, no_search_docs: Path | None = None) -> Iterator:
    chromium = chromium_path()
    if chromium is None:
        pytest.skip("no system Chromium (install the Debian package: apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed (pip install playwright; no browser download needed)")

    blocked: list[str] = []
    failed: list[str] = []
    errors: list[str] = []

    def route(r):
        host = urlsplit(r.request.url).hostname or ""
        if r.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                     args=["--headless", "--no-sandbox", "--disable-gpu",
                                           "--disable-background-networking"])
        try:
            context = browser.new_context(viewport=viewport)
            if init_script:
                context.add_init_script(init_script)
            context.route("**/*", route)
            if no_search_docs is not None:  # routes added later run first
                config = json.loads((no_search_docs / "search" / "search_index.json").read_text())["config"]
                body = json.dumps({"config": config, "docs": []})
                context.route("**/search/search_index.json",
                              lambda r: r.fulfill(status=200, content_type="application/json", body=body))
            page = context.new_page()
            page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
            page.on("console", lambda m: m.type == "error" and errors.append(f"{page.url}: console: {m.text}"))
            # net::ERR_ABORTED is the browser cancelling a request (a navigation away from the page), not a
            # missing file: those show as HTTP errors below, and requests to other hosts land in `blocked`.
            page.on("requestfailed", lambda r: "ERR_ABORTED" not in (r.failure or "")
                    and failed.append(f"{r.url} ({r.failure})"))
            page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.url} (HTTP {r.status})"))
            yield page
        finally:
            browser.close()

    assert not blocked, "the page tried to reach other hosts:\n" + "\n".join(sorted(set(blocked)))
    assert not failed, "requests failed:\n" + "\n".join(sorted(set(failed)))
    assert not errors, "JavaScript errors:\n" + "\n".join(errors)
