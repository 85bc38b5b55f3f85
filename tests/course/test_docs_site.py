"""The book builds strictly and works offline (design, sections 4.6 and 5).

- test_site_builds_without_external_assets: `mkdocs build --strict` passes and no page loads a
  script, stylesheet, font or image from another host (CPU, a few seconds).
- test_site_renders_offline (marker `browser`): headless Chromium, with every request to a host
  other than 127.0.0.1 blocked, loads the pages that have diagrams and math, and the mermaid SVG
  and KaTeX output are really there. Needs the Debian `chromium` package and the `playwright`
  Python package (never downloads a browser); skipped with the reason otherwise. Screenshots go
  to build/docs-site-*.png.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

from tests.course.offline_browser import offline_page

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL_HOSTS = {"127.0.0.1", "localhost", ""}
MARKER_HTML = re.compile(r"#\s*(&gt;&gt;&gt;|&lt;&lt;&lt;|>>>|<<<)\s*solution")


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
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


class _AssetRefs(HTMLParser):
    """URLs a browser fetches by itself when it loads the page (not <a href> links)."""

    FETCHED = {
        "script": ["src"],
        "img": ["src", "srcset"],
        "iframe": ["src"],
        "source": ["src", "srcset"],
        "video": ["src", "poster"],
        "audio": ["src"],
        "embed": ["src"],
        "object": ["data"],
    }
    LINK_RELS = {"stylesheet", "preconnect", "preload", "modulepreload", "icon", "dns-prefetch", "manifest", "prefetch"}

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "link" and set((a.get("rel") or "").split()) & self.LINK_RELS:
            self.urls.append(a.get("href") or "")
        for name in self.FETCHED.get(tag, []):
            if a.get(name):
                self.urls += [part.strip().split(" ")[0] for part in a[name].split(",")]
        if a.get("style"):
            self.urls += re.findall(r"url\(\s*['\"]?([^'\")]+)", a["style"])


def _external(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about"):
        return False
    return bool(parts.netloc) and (parts.hostname or "") not in LOCAL_HOSTS


def test_site_builds_without_external_assets(built_site: Path):
    pages = sorted(built_site.rglob("*.html"))
    assert pages, "no HTML pages were built"
    problems = []
    for page in pages:
        html = page.read_text(encoding="utf-8")
        parser = _AssetRefs()
        parser.feed(html)
        rel = page.relative_to(built_site)
        problems += [f"{rel}: loads {u}" for u in parser.urls if _external(u)]
        # mkdocs-material fetches mermaid from unpkg unless a global `mermaid` exists: every page
        # must load the self-hosted copy.
        if "assets/vendor/mermaid/mermaid.min.js" not in html and rel.name != "404.html":
            problems.append(f"{rel}: does not load the self-hosted mermaid.min.js")
        if MARKER_HTML.search(html):
            problems.append(f"{rel}: a `# >>> solution` / `# <<< solution` marker line shows in the page")
    for css in built_site.rglob("*.css"):
        for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", css.read_text(encoding="utf-8", errors="replace")):
            if _external(url):
                problems.append(f"{css.relative_to(built_site)}: url({url})")
        for url in re.findall(r"@import\s+(?:url\()?['\"]?([^'\");\s]+)", css.read_text(encoding="utf-8", errors="replace")):
            if _external(url):
                problems.append(f"{css.relative_to(built_site)}: @import {url}")
    for name in ("mermaid/mermaid.min.js", "katex/katex.min.js", "katex/katex.min.css", "katex/contrib/auto-render.min.js"):
        if not (built_site / "assets" / "vendor" / name).is_file():
            problems.append(f"assets/vendor/{name} is missing from the built site")
    if not list((built_site / "assets" / "vendor" / "katex" / "fonts").glob("*.woff2")):
        problems.append("the KaTeX fonts are missing from the built site")
    for private in ("hooks", "outputs"):
        if (built_site / private).exists():
            problems.append(f"docs/{private}/ was copied into the site")
    assert not problems, "the site is not self-contained:\n" + "\n".join(problems)


# ------------------------------------------------------------------------------ browser check


@pytest.fixture(scope="module")
def site_server(built_site: Path):
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002
        pass


def _pages_with(site: Path, needle: str) -> list[str]:
    return sorted(
        p.relative_to(site).as_posix() for p in site.rglob("*.html") if needle in p.read_text(encoding="utf-8")
    )


# Make mkdocs-material's closed shadow roots (where it puts the mermaid SVG) inspectable.
OPEN_SHADOW = """
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) { return attach.call(this, { ...init, mode: "open" }); };
"""


@pytest.mark.browser
def test_site_renders_offline(built_site: Path, site_server: str):
    mermaid_pages = _pages_with(built_site, 'class="mermaid"')
    math_pages = _pages_with(built_site, 'class="arithmatex"')
    assert mermaid_pages, "no page has a mermaid diagram to check"
    assert math_pages, "no page has math to check"
    pages = sorted(set(mermaid_pages[:2] + math_pages[:2]))
    font_loads: list[str] = []
    shots = ROOT / "build"
    shots.mkdir(exist_ok=True)

    with offline_page({"width": 1280, "height": 900}, init_script=OPEN_SHADOW) as page:
        page.on("response", lambda r: "/katex/fonts/" in r.url and r.ok and font_loads.append(r.url))
        for rel in pages:
            page.goto(f"{site_server}/{rel}", wait_until="load")
            tag = rel.replace("/", "_").removesuffix(".html")
            if rel in mermaid_pages:
                n = page.evaluate("document.querySelectorAll('.md-content .mermaid').length")
                page.wait_for_function(
                    "() => { const d = [...document.querySelectorAll('div.mermaid')];"
                    " return d.length > 0 && d.every(e => e.shadowRoot && e.shadowRoot.querySelector('svg')); }",
                    timeout=20_000,
                )
                info = page.evaluate(
                    "() => [...document.querySelectorAll('div.mermaid')].map(e => {"
                    " const s = e.shadowRoot.querySelector('svg'); const b = s.getBoundingClientRect();"
                    " return {w: b.width, h: b.height, nodes: s.querySelectorAll('.node').length,"
                    " text: s.textContent.length}; })"
                )
                assert len(info) == n, f"{rel}: {n} diagrams, {len(info)} rendered"
                for d in info:
                    assert d["w"] > 50 and d["h"] > 20 and d["text"] > 0, f"{rel}: empty mermaid SVG {d}"
                assert not page.query_selector_all("pre.mermaid"), f"{rel}: a mermaid block was left unrendered"
            if rel in math_pages:
                page.wait_for_function(
                    "() => [...document.querySelectorAll('.arithmatex')].every(e => e.querySelector('.katex'))",
                    timeout=20_000,
                )
                assert not page.query_selector_all(".katex-error"), f"{rel}: KaTeX could not typeset some math"
                page.evaluate("document.fonts.ready")
                assert page.evaluate("document.fonts.check('16px KaTeX_Main')"), f"{rel}: KaTeX font not loaded"
            page.screenshot(path=str(shots / f"docs-site-{tag}.png"), full_page=True)

    assert font_loads, "no KaTeX font was loaded from the site"
