"""Bundle the docs site's JavaScript/CSS assets locally (design, section 5: no CDN).

The book must work offline, so mermaid (diagrams), KaTeX (math), Pyodide (Python in the browser,
for the practice judge) and CodeMirror 5 (its editor) are taken from their npm packages at build
time and copied into docs/assets/vendor/ (git-ignored):

    docs/assets/vendor/mermaid/mermaid.min.js
    docs/assets/vendor/katex/katex.min.js, katex.min.css, fonts/*, contrib/auto-render.min.js
    docs/assets/vendor/pyodide/pyodide.mjs, pyodide.asm.mjs, pyodide.asm.wasm, python_stdlib.zip,
                               pyodide-lock.json   (the core runtime: what loadPyodide fetches)
    docs/assets/vendor/codemirror/codemirror.js, codemirror.css, mode/python/python.js,
                                  addon/edit/matchbrackets.js

mkdocs.yml loads them through extra_javascript / extra_css. mkdocs-material only fetches mermaid
from unpkg when no global `mermaid` exists, so the self-hosted copy is the one used.

Usage:  python tools/vendor_assets.py [--force] [--check]

It is idempotent: when the stamp file matches the pinned versions and every file is present it
returns at once. The npm tarballs are cached under build/npm/ (`npm pack`, no node_modules).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NPM_DIR = ROOT / "build" / "npm"
VENDOR = ROOT / "docs" / "assets" / "vendor"
STAMP = VENDOR / ".stamp.json"

# Exact versions (inside mermaid@11 and katex@0.16) so every build bundles the same bytes.
# mkdocs-material 9.x is written against mermaid 11. CodeMirror stays on 5 (plain scripts, no bundler).
PACKAGES = {"mermaid": "11.17.2", "katex": "0.16.47", "pyodide": "314.0.7", "codemirror": "5.65.21"}

# (package, path inside the tarball's package/ folder, destination under VENDOR). A trailing "/"
# copies every file of that folder.
FILES = [
    ("mermaid", "dist/mermaid.min.js", "mermaid/mermaid.min.js"),
    ("mermaid", "LICENSE", "mermaid/LICENSE"),
    ("katex", "dist/katex.min.js", "katex/katex.min.js"),
    ("katex", "dist/katex.min.css", "katex/katex.min.css"),
    ("katex", "dist/contrib/auto-render.min.js", "katex/contrib/auto-render.min.js"),
    ("katex", "dist/fonts/", "katex/fonts/"),
    ("katex", "LICENSE", "katex/LICENSE"),
    # Pyodide's npm package is the core runtime only (no package wheels); the page's worker imports
    # pyodide.mjs, which fetches the rest from the same folder (indexURL). MPL-2.0 (package.json).
    ("pyodide", "pyodide.mjs", "pyodide/pyodide.mjs"),
    ("pyodide", "pyodide.asm.mjs", "pyodide/pyodide.asm.mjs"),
    ("pyodide", "pyodide.asm.wasm", "pyodide/pyodide.asm.wasm"),
    ("pyodide", "python_stdlib.zip", "pyodide/python_stdlib.zip"),
    ("pyodide", "pyodide-lock.json", "pyodide/pyodide-lock.json"),
    ("pyodide", "package.json", "pyodide/package.json"),
    ("codemirror", "lib/codemirror.js", "codemirror/codemirror.js"),
    ("codemirror", "lib/codemirror.css", "codemirror/codemirror.css"),
    ("codemirror", "mode/python/python.js", "codemirror/mode/python/python.js"),
    ("codemirror", "addon/edit/matchbrackets.js", "codemirror/addon/edit/matchbrackets.js"),
    ("codemirror", "LICENSE", "codemirror/LICENSE"),
]

# Files whose presence the fast path checks (the fonts folder is checked for being non-empty).
REQUIRED = [dest for _, _, dest in FILES if not dest.endswith("/")]


class VendorError(RuntimeError):
    """A clear, user-facing reason why the assets could not be bundled."""


def _stamp_content() -> dict:
    return {"packages": PACKAGES, "files": [dest for _, _, dest in FILES]}


def is_current(vendor: Path = VENDOR) -> bool:
    stamp = vendor / STAMP.name
    try:
        if json.loads(stamp.read_text()) != _stamp_content():
            return False
    except (OSError, ValueError):
        return False
    if not all((vendor / rel).is_file() for rel in REQUIRED):
        return False
    fonts = vendor / "katex" / "fonts"
    return fonts.is_dir() and any(fonts.glob("*.woff2"))


def _tarball(name: str, version: str) -> Path:
    return NPM_DIR / f"{name}-{version}.tgz"


def _npm_pack(missing: list[tuple[str, str]]) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise VendorError(
            "npm was not found on PATH.\n"
            "The docs bundle mermaid and KaTeX from their npm packages (the site must work offline,\n"
            "no CDN). Install Node.js with npm (for example `apt-get install nodejs npm`, or from\n"
            "https://nodejs.org), then run `python tools/vendor_assets.py` again."
        )
    NPM_DIR.mkdir(parents=True, exist_ok=True)
    specs = [f"{name}@{version}" for name, version in missing]
    cmd = [npm, "pack", "--silent", *specs]
    print(f"vendor_assets: {' '.join(['npm', 'pack', *specs])}  (into {NPM_DIR.relative_to(ROOT)})", flush=True)
    try:
        proc = subprocess.run(cmd, cwd=NPM_DIR, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        raise VendorError(f"`{' '.join(cmd)}` timed out after 600 s (is the npm registry reachable?)") from exc
    if proc.returncode != 0:
        raise VendorError(
            f"`npm pack {' '.join(specs)}` failed (exit {proc.returncode}); is the npm registry reachable?\n"
            + (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        )
    for name, version in missing:
        if not _tarball(name, version).is_file():
            raise VendorError(f"npm pack did not produce {_tarball(name, version)}")


def _extract(dest_root: Path) -> None:
    opened = {name: tarfile.open(_tarball(name, version), "r:gz") for name, version in PACKAGES.items()}
    try:
        for name, src, dest in FILES:
            tf = opened[name]
            prefix = f"package/{src}"
            members = [
                m
                for m in tf.getmembers()
                if m.isfile() and (m.name.startswith(prefix) if src.endswith("/") else m.name == prefix)
            ]
            if not members:
                raise VendorError(f"{name}@{PACKAGES[name]}: {src} not found in the npm package")
            for m in members:
                rel = m.name[len(prefix):] if src.endswith("/") else ""
                if "/" in rel or rel.startswith("."):
                    continue  # flat folders only; never follow odd names out of dest_root
                target = dest_root / dest / rel if rel else dest_root / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                data = tf.extractfile(m)
                assert data is not None
                target.write_bytes(data.read())
    finally:
        for tf in opened.values():
            tf.close()


@contextlib.contextmanager
def _lock():
    """Serialise concurrent runs (two builds at once) on one lock file."""
    NPM_DIR.mkdir(parents=True, exist_ok=True)
    with open(NPM_DIR / ".lock", "w") as fh:
        try:
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: best effort
            pass
        yield


def ensure(force: bool = False, quiet: bool = False) -> bool:
    """Make docs/assets/vendor/ current. Returns True if it had to (re)build it."""
    if not force and is_current():
        return False
    with _lock():
        if not force and is_current():  # somebody else finished while we waited
            return False
        t0 = time.perf_counter()
        missing = [(n, v) for n, v in PACKAGES.items() if force or not _tarball(n, v).is_file()]
        if missing:
            _npm_pack(missing)
        VENDOR.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".vendor-", dir=VENDOR.parent))
        try:
            _extract(tmp)
            (tmp / STAMP.name).write_text(json.dumps(_stamp_content(), indent=2) + "\n")
            old = VENDOR.parent / f".vendor-old-{os.getpid()}"
            if VENDOR.exists():
                VENDOR.rename(old)
            tmp.rename(VENDOR)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if not quiet:
            versions = ", ".join(f"{n} {v}" for n, v in PACKAGES.items())
            print(
                f"vendor_assets: bundled {versions} into {VENDOR.relative_to(ROOT)}/ "
                f"in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="download and copy again even if up to date")
    parser.add_argument("--check", action="store_true", help="only report whether the assets are current")
    args = parser.parse_args(argv)
    if args.check:
        ok = is_current()
        print(f"vendor_assets: {'up to date' if ok else 'missing or stale; run python tools/vendor_assets.py'}")
        return 0 if ok else 1
    try:
        if not ensure(force=args.force):
            print(f"vendor_assets: up to date ({VENDOR.relative_to(ROOT)}/)")
    except VendorError as exc:
        print(f"vendor_assets: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
