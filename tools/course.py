"""Learner-facing course commands: check, run, lab, diff, reset, progress (design, section 3).

Trees are assembled under build/ with symlinks, one folder per tree, and put first on PYTHONPATH:
    build/ref/chNN      the reference tree at chapter N             (SOL=1)
    build/learner/chNN  reference at N-1 + your chapters/chNN files (default)
    build/mine/chNN     your chapters/ch00..chNN files, cumulatively (MINE=1)
    build/skeleton/chNN reference at N-1 + the pristine skeleton of N (course integrity)
"""

from __future__ import annotations

import argparse
import difflib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import skeleton
from tools.plots import PLOTS
from tools.tree import BUILD, ROOT, Chapter, all_chapters, chapter_files, get_chapter, overlay, reference_files

TESTS = ROOT / "tests"


# ----------------------------------------------------------------------------- trees
def _current_links(dest: Path) -> dict[str, Path]:
    return {p.relative_to(dest).as_posix(): Path(os.readlink(p)) for p in dest.rglob("*") if p.is_symlink()}


def _link_tree(dest: Path, files: dict[str, Path]) -> Path:
    """Make dest a tree of symlinks to `files`. An identical tree is left alone; a new one is built beside
    it and swapped in under a lock, so parallel test processes never see a half-built tree."""
    wanted = {rel: src.resolve() for rel, src in files.items()}
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.is_dir() and _current_links(dest) == wanted:
            return dest
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-new-", dir=dest.parent))
        for rel, src in wanted.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).symlink_to(src)
        old = dest.with_name(f".{dest.name}-old-{os.getpid()}")
        if dest.exists():
            dest.rename(old)
        staging.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    return dest


def learner_files(n: int, mine: bool = False) -> dict[str, Path]:
    if mine:  # the learner's own engine: their files of every chapter <= n
        return overlay(n, lambda ch: ch.skeleton_dir)
    files = reference_files(n - 1, tree_of=n)
    files.update(chapter_files(get_chapter(n).skeleton_dir))
    return files


def assemble(n: int, kind: str) -> Path:
    """Build one tree under build/<kind>/chNN and return its folder."""
    ch = get_chapter(n)
    dest = BUILD / kind / ch.tag
    if kind == "ref":
        return _link_tree(dest, reference_files(n))
    if kind in ("learner", "mine"):
        return _link_tree(dest, learner_files(n, mine=kind == "mine"))
    if kind == "skeleton":
        files, _ = skeleton.generate(ch)
        pristine = BUILD / "pristine" / ch.tag
        if pristine.exists():
            shutil.rmtree(pristine)
        for rel, text in files.items():
            (pristine / rel).parent.mkdir(parents=True, exist_ok=True)
            (pristine / rel).write_text(text)
        tree = reference_files(n - 1, tree_of=n)
        tree.update(chapter_files(pristine))
        return _link_tree(dest, tree)
    raise ValueError(f"unknown tree kind {kind!r}")


def tree_env(tree: Path, threads: int | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(ROOT)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep caches out of the symlinked source folders
    if re.fullmatch(r"ch\d\d", tree.name):  # which chapter the tree is at (tests marked superseded read it)
        env["MINISGL_TREE_CHAPTER"] = str(int(tree.name[2:]))
    if threads:  # several processes side by side: oversubscribed OpenMP threads spin and crawl
        env["MINISGL_TEST_THREADS"] = env["MINISGL_CPU_THREADS"] = env["OMP_NUM_THREADS"] = str(threads)
    return env


def suite_of(ch: Chapter) -> Path:
    matches = sorted(TESTS.glob(f"test_{ch.tag}_*.py"))
    if not matches:
        raise FileNotFoundError(f"no test suite tests/test_{ch.tag}_*.py for chapter {ch.number}")
    return matches[0]


def run_suite(ch: Chapter, tree: Path, report: Path, extra: list[str] | None = None,
              threads: int | None = None, quiet: bool = True) -> tuple[int, list[dict], str]:
    """Run chapter ch's suite on a tree; returns (pytest exit code, per-test records, output)."""
    report.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", str(suite_of(ch)), "-p", "tools.stubreport",
           f"--stub-report={report}", "-p", "no:cacheprovider", "-q", "--no-header", "-rN",
           "--tb=short", *(extra or [])]
    proc = subprocess.run(cmd, cwd=ROOT, env=tree_env(tree, threads), capture_output=quiet, text=True)
    records = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    output = (proc.stdout or "") + (proc.stderr or "")
    return proc.returncode, records, output


# ----------------------------------------------------------------------------- check
def _stub_status(ch: Chapter, records: list[dict], learner_dir: Path | None) -> list[tuple[str, str, str]]:
    rows = []
    for stub in skeleton.stubs_of(ch):
        source = learner_dir / stub.path if learner_dir else None
        if source is not None and source.exists() and stub.ident in source.read_text():
            rows.append((stub.qualname, "not started", ""))
            continue
        mine = [r for r in records if stub.qualname in r.get("stubs", [])]
        failed = [r for r in mine if r["outcome"] == "failed"]
        if not mine:
            rows.append((stub.qualname, "untested", "no test is marked with this stub"))
        elif failed:
            first = failed[0]
            if first.get("error") == "NotImplementedError" and "TODO(" in first.get("message", ""):
                reason = f"needs {first['message']}"
            else:
                reason = f"{first['test'].split('::')[-1]}: {first.get('error', '')}: {first.get('message', '')}"
            rows.append((stub.qualname, "failing", reason[:160]))
        else:
            rows.append((stub.qualname, "done", f"{len(mine)} tests pass"))
    return rows


COLORS = {"done": "32", "failing": "31", "not started": "33", "untested": "35"}


def _color(text: str, status: str) -> str:
    if not sys.stdout.isatty() or os.environ.get("NO_COLOR"):
        return text
    return f"\033[{COLORS.get(status, '0')}m{text}\033[0m"


def cmd_check(n: int, mine: bool, sol: bool, verbose: bool) -> int:
    ch = get_chapter(n)
    kind = "ref" if sol else ("mine" if mine else "learner")
    tree = assemble(n, kind)
    print(f"== chapter {n}: {ch.title}  ({'reference' if sol else 'your ' + ('engine' if mine else 'chapter')} "
          f"tree: {tree.relative_to(ROOT)})")
    t0 = time.time()
    code, records, output = run_suite(ch, tree, BUILD / "reports" / f"{ch.tag}-{kind}.jsonl",
                                      extra=[] if not verbose else ["-v"], quiet=not verbose)
    rows = _stub_status(ch, records, None if sol else ch.skeleton_dir)
    width = max((len(r[0]) for r in rows), default=10)
    print(f"\n{'TODO stub':<{width}}  status       detail")
    for name, status, detail in rows:
        print(f"{name:<{width}}  {_color(f'{status:<11}', status)}  {detail}")
    passed = sum(r["outcome"] == "passed" for r in records)
    failed = [r for r in records if r["outcome"] == "failed"]
    skipped = sum(r["outcome"] == "skipped" for r in records)
    print(f"\ntests: {passed} passed, {len(failed)} failed, {skipped} skipped ({time.time() - t0:.1f} s)")
    stray = [r for r in failed if not r.get("stubs")]
    for r in stray[:5]:
        print(f"  failed: {r['test']}: {r.get('error', '')}: {r.get('message', '')}")
    if code != 0:
        if code not in (0, 1) and not records:
            print(output[-3000:])
        print(f"\nchapter {n} is not passing yet. `make check CH={n} V=1` shows the full pytest output.")
        return 1
    print(f"\nchapter {n} passes. Its example:\n")
    return cmd_run(n, sol=sol, mine=mine, tree=tree)


# ----------------------------------------------------------------------------- run
def main_script(ch: Chapter, sol: bool) -> Path:
    return (ch.solution_dir if sol else ch.skeleton_dir) / "main.py"


def cmd_run(n: int, sol: bool, mine: bool = False, tree: Path | None = None, args: list[str] | None = None) -> int:
    ch = get_chapter(n)
    tree = tree or assemble(n, "ref" if sol else ("mine" if mine else "learner"))
    script = main_script(ch, sol)
    if not script.exists():
        print(f"chapter {n} has no main.py")
        return 1
    return subprocess.run([sys.executable, str(script), *(args or [])], cwd=ROOT, env=tree_env(tree)).returncode


# ----------------------------------------------------------------------------- lab
def cmd_lab(n: int, sol: bool, mine: bool, args: list[str] | None = None) -> int:
    """JupyterLab on 127.0.0.1 (no browser opened), its kernels importing the same tree `make check` uses."""
    from tools.notebooks import kernel_env

    tree = assemble(n, "ref" if sol else ("mine" if mine else "learner"))
    print(f"== JupyterLab, chapter {n} tree: {tree.relative_to(ROOT)} (open the URL with the token below; "
          "notebooks/ holds the stage milestones; Ctrl-C stops it)", flush=True)
    cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", "--no-browser", f"--ServerApp.root_dir={ROOT}",
           *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []), *(args or [])]
    try:
        return subprocess.run(cmd, cwd=ROOT, env=kernel_env(tree_env(tree))).returncode
    except KeyboardInterrupt:
        return 0


EXAMPLES = ROOT / "examples"
OUTPUTS = ROOT / "docs" / "outputs"
IMAGES = ROOT / "docs" / "assets" / "images"


def cmd_example(name: str, args: list[str] | None = None) -> int:
    """Run examples/<name>.py on the final reference tree (the whole engine as it stands)."""
    script = EXAMPLES / f"{name}.py"
    if not script.exists():
        known = ", ".join(sorted(p.stem for p in EXAMPLES.glob("*.py")))
        raise ValueError(f"no example {name!r} (examples: {known})")
    tree = assemble(all_chapters()[-1].number, "ref")
    return subprocess.run([sys.executable, str(script), *(args or [])], cwd=ROOT, env=tree_env(tree)).returncode


def capture(script: Path, tree: Path, threads: int | None = None) -> str:
    """Run a script on a tree and return what it printed; raise if it fails."""
    env = tree_env(tree, threads)
    env["MINISGL_QUIET"] = "1"  # no progress bars in stored outputs
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{script.relative_to(ROOT)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def cmd_outputs(only: list[str] | None = None) -> int:
    """Regenerate docs/outputs/*.txt: every chapter's main.py and every example, run on the reference
    (`only`: just these outputs, by name, e.g. ch08_cache or stage2)."""
    OUTPUTS.mkdir(parents=True, exist_ok=True)
    final = assemble(all_chapters()[-1].number, "ref")
    jobs = [(ch.slug, main_script(ch, sol=True), assemble(ch.number, "ref")) for ch in all_chapters()]
    jobs += [(p.stem, p, final) for p in sorted(EXAMPLES.glob("*.py"))]
    unknown = set(only or []) - {name for name, _, _ in jobs}
    if unknown:
        raise ValueError(f"no output named {', '.join(sorted(unknown))} (names: {', '.join(n for n, _, _ in jobs)})")
    for name, script, tree in jobs:
        if only and name not in only:
            continue
        t0 = time.time()
        (OUTPUTS / f"{name}.txt").write_text(capture(script, tree))
        print(f"docs/outputs/{name}.txt  ({time.time() - t0:.1f} s)")
    IMAGES.mkdir(parents=True, exist_ok=True)
    for png in sorted(PLOTS.glob("*.png")):  # plots the examples drew from their runs
        shutil.copy(png, IMAGES / png.name)
        print(f"docs/assets/images/{png.name}")
    return 0


# ----------------------------------------------------------------------------- diff / reset / progress
def cmd_diff(n: int) -> int:
    """Each file as chapter n leaves it against the copy the tree had before. Labels name the chapter a copy
    comes from (chapter 17 follows 11 when 12-16 are not built; an unchanged file may come from chapter 5)."""
    get_chapter(n)
    before, after = reference_files(n - 1), reference_files(n)
    for rel in sorted(set(before) | set(after)):
        a = strip(before[rel]) if rel in before else []
        b = strip(after[rel]) if rel in after else []
        if a != b:
            old = f"{_source_tag(before[rel])}/{rel}" if rel in before else "/dev/null"
            sys.stdout.writelines(difflib.unified_diff(a, b, old, f"{_source_tag(after[rel])}/{rel}"))
    return 0


def _source_tag(path: Path) -> str:
    """chNN of the solutions/ folder a tree file comes from."""
    return path.resolve().relative_to(ROOT / "solutions").parts[0][:4]


def strip(path: Path) -> list[str]:
    from tools.tree import strip_markers

    return strip_markers(path.read_text()).splitlines(keepends=True)


def cmd_reset(n: int) -> int:
    ch = get_chapter(n)
    if ch.skeleton_dir.exists():
        backup = BUILD / "backups" / f"{ch.slug}-{time.strftime('%Y%m%d-%H%M%S')}"
        shutil.copytree(ch.skeleton_dir, backup)
        print(f"saved your chapter {n} files to {backup.relative_to(ROOT)}")
    skeleton.write(ch, force=True)
    print(f"chapters/{ch.slug} is a pristine skeleton again")
    return 0


def chapter_state(ch: Chapter) -> str:
    stubs = skeleton.stubs_of(ch)
    remaining = [s for s in stubs if s.ident in (ch.skeleton_dir / s.path).read_text()] if stubs else []
    if stubs and len(remaining) == len(stubs):
        return "not started"
    tree = assemble(ch.number, "learner")
    code, _, _ = run_suite(ch, tree, BUILD / "reports" / f"{ch.tag}-progress.jsonl")
    return "passing" if code == 0 else "in progress"


def cmd_progress() -> int:
    for ch in all_chapters():
        state = chapter_state(ch)
        print(f"ch{ch.number:02d}  {ch.title:<22} {_color(state, {'passing': 'done', 'in progress': 'failing'}.get(state, 'not started'))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.course", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("check", "run", "lab", "diff", "reset", "tree"):
        p = sub.add_parser(name)
        p.add_argument("ch", type=int)
        p.add_argument("--sol", action="store_true", help="use the reference solution of this chapter")
        p.add_argument("--mine", action="store_true", help="use your files of every chapter <= CH")
        p.add_argument("-v", "--verbose", action="store_true")
        p.add_argument("--kind", default=None, help="tree: ref, learner, mine or skeleton")
    sub.add_parser("progress")
    sub.add_parser("copies").add_argument("path", nargs="?", help="a package path, e.g. minisgl/engine/engine.py")
    sub.add_parser("outputs").add_argument("only", nargs="*", help="output names (default: all)")
    ex = sub.add_parser("example")
    ex.add_argument("name")
    a, rest = ap.parse_known_args(argv)
    if rest and a.cmd not in ("run", "example", "lab"):
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if a.cmd == "progress":
            return cmd_progress()
        if a.cmd == "copies":
            from tools.copies import cmd_copies

            return cmd_copies(a.path)
        if a.cmd == "outputs":
            return cmd_outputs(a.only)
        if a.cmd == "example":
            return cmd_example(a.name, rest)
        if a.cmd == "check":
            return cmd_check(a.ch, a.mine, a.sol, a.verbose)
        if a.cmd == "run":
            return cmd_run(a.ch, a.sol, a.mine, args=rest)
        if a.cmd == "lab":
            return cmd_lab(a.ch, a.sol, a.mine, args=rest)
        if a.cmd == "diff":
            return cmd_diff(a.ch)
        if a.cmd == "reset":
            return cmd_reset(a.ch)
        if a.cmd == "tree":
            print(assemble(a.ch, a.kind or ("ref" if a.sol else "learner")))
            return 0
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
