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
from tools.tree import (BUILD, ROOT, STANDALONE, Chapter, all_chapters, chapter_files, get_chapter, overlay,
                        reference_files)

TESTS = ROOT / "tests"


def _shown(path: Path) -> str:
    """A path as the learner reads it: relative to the repository when it is inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


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


def _cgroup_cpus() -> int | None:
    """The CPU quota of this container (cgroup v2 cpu.max), in whole CPUs; None when there is none."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        return None if quota == "max" else max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        return None


def _physical_cores(cpus: set[int]) -> int:
    """Physical cores among these CPUs: hyper-threads of one core share its arithmetic units."""
    cores = set()
    for cpu in cpus:
        try:
            cores.add(Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip())
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus)


def cpu_threads() -> int:
    """CPU threads for one engine process (torch and OpenMP): $MINISGL_CPU_THREADS (or $OMP_NUM_THREADS) when
    set, else the physical cores this process may use, less the cores other processes keep busy (1-minute load
    average), at least one. More threads than free cores is the slowest choice of all: OpenMP threads spin
    waiting for each other (on a busy 2-core machine `make run` went from 7.5 to 0.7 tokens/s)."""
    for name in ("MINISGL_CPU_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(name, "").strip().isdigit():
            return int(os.environ[name])
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    usable = min(len(cpus), _cgroup_cpus() or len(cpus))
    busy = round(os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0
    return max(1, min(_physical_cores(cpus), usable, usable - busy))


def tree_env(tree: Path, threads: int | None = None) -> dict[str, str]:
    """The environment of a process that runs on a tree: the tree first on PYTHONPATH, and `threads` CPU
    threads (default: cpu_threads()) for torch, OpenMP and the chapter suites."""
    env = {k: v for k, v in os.environ.items() if k != "MINISGL_PREFORK"}  # for the course's tests' own jobs only
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(ROOT)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep caches out of the symlinked source folders
    env["PYTHONUNBUFFERED"] = "1"  # prints and progress bars (stderr) reach a pipe in the order they happen
    if re.fullmatch(r"ch\d\d", tree.name):  # which chapter the tree is at (tests marked superseded read it)
        env["MINISGL_TREE_CHAPTER"] = str(int(tree.name[2:]))
    threads = cpu_threads() if threads is None else threads
    if threads > 0:  # 0: torch's own default (one thread per core)
        env["MINISGL_TEST_THREADS"] = env["MINISGL_CPU_THREADS"] = env["OMP_NUM_THREADS"] = str(threads)
    return env


def threads_note(env: dict[str, str]) -> str:
    count = env.get("MINISGL_CPU_THREADS", "0")
    threads = "torch's default CPU threads" if count == "0" else f"{count} CPU thread{'s' if count != '1' else ''}"
    return f"{threads} (MINISGL_CPU_THREADS=N chooses)"


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
    if quiet:
        code, out, err = run_python(cmd[1:], tree_env(tree, threads))
    else:
        code, out, err = subprocess.run(cmd, cwd=ROOT, env=tree_env(tree, threads)).returncode, "", ""
    records = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    return code, records, out + err


_PREFORKER = None


def run_python(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """`python *argv` in ROOT with env: (exit code, stdout, stderr). With MINISGL_PREFORK=1 (the course's own
    tests set it) the job is a fork of one warm interpreter that has torch and transformers imported already
    (tools/prefork.py): the same run without ~10 s of imports per process."""
    global _PREFORKER
    if os.environ.get("MINISGL_PREFORK") != "1":
        proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True)
        return proc.returncode, proc.stdout, proc.stderr
    from tools.prefork import Preforker

    if _PREFORKER is None:
        _PREFORKER = Preforker()
    with tempfile.TemporaryDirectory(prefix="job-", dir=BUILD) as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        code = _PREFORKER.run(argv, env, ROOT, out, err)
        return code, out.read_text(errors="replace"), err.read_text(errors="replace")


# ----------------------------------------------------------------------------- check
def _timed_out(record: dict) -> bool:
    return record.get("message", "").startswith("Timeout (>") and "pytest-timeout" in record.get("message", "")


def _in_traceback(record: dict, stub_names: list[str]) -> list[str]:
    """The stub whose code the failure happened in: the innermost traceback frame that is (inside) a stub. Not for a
    test stopped by the time limit: its traceback says where the code was when stopped, not where the bug is."""
    if _timed_out(record):
        return []
    for frame in reversed(record.get("frames", [])):
        for name in stub_names:
            if frame == name or frame.startswith(name + "."):
                return [name]
    return []


def _unimplemented(record: dict, stub_names: list[str]) -> list[str]:
    """The stub whose own NotImplementedError the failure is, raised here or in a server's worker."""
    if record.get("error") != "NotImplementedError":
        return []
    name = record.get("message", "").partition("): ")[2]
    return [name] if name in stub_names else []


def ran(record: dict) -> list[str]:
    """The stubs a test ran: those it entered in the test's process (recorded by make check), or, when none were
    recorded there (they ran in a server's worker, or nothing was recorded), the stubs it is marked with."""
    return record.get("entered") or record.get("stubs", [])


def blame(records: list[dict], stub_names: list[str]) -> dict[str, list[str]]:
    """Failed test -> the stubs it blames, on evidence only, or [] when nothing points at one (an unattributed
    failure: make check shows its test and assertion, never a guess; a test can fail for a reason no stub owns,
    such as a loaded machine). The evidence, strongest first: the stub's own NotImplementedError; the stub whose
    code the failure happened in; the only stub the test ran; among the several a test ran, those already pinned
    with the same error (the same bug). A stub passing its other tests is no evidence either way: a correct stub
    is never blamed for a failure nothing ties to it."""
    failed = [r for r in records if r["outcome"] == "failed"]
    pinned = {}
    for r in failed:
        only = [s for s in ran(r) if s in stub_names]
        names = _unimplemented(r, stub_names) or _in_traceback(r, stub_names) or (only if len(only) == 1 else [])
        if names:
            pinned[r["test"]] = names

    def signature(record: dict) -> tuple:
        return record.get("error"), record.get("message")

    known = {}  # stub -> the errors of the failures pinned on it (every time limit reads the same: no error)
    for r in failed:
        for name in pinned.get(r["test"], []) if not _timed_out(r) else ():
            known.setdefault(name, set()).add(signature(r))
    for r in failed:
        same = [s for s in ran(r) if signature(r) in known.get(s, ())]
        if r["test"] not in pinned and same:
            pinned[r["test"]] = same
    return {r["test"]: pinned.get(r["test"], []) for r in failed}


# make check's limit per test (setup included), far above what any test takes on the reference, so that an endless
# loop costs a couple of minutes at most rather than pytest's 10 (pyproject.toml); MINISGL_TEST_TIMEOUT=N changes it.
CHECK_TIMEOUT_S = 120


def check_timeout() -> int:
    value = os.environ.get("MINISGL_TEST_TIMEOUT", "").strip()
    return int(value) if value.isdigit() else CHECK_TIMEOUT_S


def _failure_reason(record: dict) -> str:
    if record.get("error") == "NotImplementedError" and "TODO(" in record.get("message", ""):
        return f"needs {record['message']}"
    if _timed_out(record):
        return (f"{record['test'].split('::')[-1]}: still running after {check_timeout()} s, make check's limit "
                f"per test: an endless loop? (MINISGL_TEST_TIMEOUT=N s changes the limit)")
    return f"{record['test'].split('::')[-1]}: {record.get('error', '')}: {record.get('message', '')}"[:160]


def _skipped_here(skipped: list[dict]) -> str:
    """Why a stub's tests all skip on this machine, the skip reasons first (they say what to install, e.g.
    'needs Triton (Linux only): pip install triton==3.6.0'), then how many."""
    reasons = "; ".join(dict.fromkeys(r.get("message") or "no reason given" for r in skipped))
    return f"{reasons} (its {len(skipped)} test{'s skip' if len(skipped) > 1 else ' skips'} here)"


def _all_skipped(stub: str, records: list[dict]) -> bool:
    marked = [r for r in records if stub in r.get("stubs", [])]
    return bool(marked) and all(r["outcome"] == "skipped" for r in marked)


def stub_status(stubs: list[skeleton.Stub], records: list[dict],
                learner_dir: Path | None) -> list[tuple[str, str, str, list[str]]]:
    """One row per stub: (name, status, detail, explanation lines of its first failure)."""
    names = [s.qualname for s in stubs]
    blamed = blame(records, names)
    rows = []
    for stub in stubs:
        source = learner_dir / stub.path if learner_dir else None
        marked = [r for r in records if stub.qualname in r.get("stubs", [])]
        mine = [r for r in marked if r["outcome"] != "skipped"]
        if source is not None and source.exists() and stub.ident in source.read_text():
            rows.append((stub.qualname, "not started", _skipped_here(marked) if marked and not mine else "", []))
            continue
        failing = [r for r in records if stub.qualname in blamed.get(r["test"], [])]
        unclear = [r for r in records if blamed.get(r["test"]) == [] and stub.qualname in ran(r)]
        if failing:
            first = failing[0]
            explanation = [] if first.get("error") == "NotImplementedError" else [
                line for line in first.get("explanation", [])
                if line != first.get("message") and line != "Use -v to get more diff"]
            rows.append((stub.qualname, "failing", _failure_reason(first), explanation))
        elif not mine:
            detail = _skipped_here(marked) if marked else "no test is marked with this stub"
            rows.append((stub.qualname, "untested", detail, []))
        elif unclear:  # it ran in a failure that nothing ties to one stub: neither done nor to blame
            passed = sum(r["outcome"] == "passed" for r in mine)
            rows.append((stub.qualname, "unclear", f"{passed} test{'s pass' if passed != 1 else ' passes'}; "
                         f"{len(unclear)} more fail{'s' if len(unclear) == 1 else ''}, unattributed (below)", []))
        else:
            passed = sum(r["outcome"] == "passed" for r in mine)
            others = sorted({b for r in mine for b in blamed.get(r["test"], [])})
            failed = len(mine) - passed
            detail = ("1 test passes" if passed == 1 else f"{passed} tests pass") + (
                f"; {failed} more fail{'s' if failed == 1 else ''}, blamed on {', '.join(others)}" if others else "")
            rows.append((stub.qualname, "done", detail, []))
    return rows


def print_unattributed(failed: list[dict], blamed: dict[str, list[str]], shown: int = 5) -> None:
    """The failures nothing ties to one stub: each test, its first assertion and the stubs it ran."""
    loose = [r for r in failed if not blamed.get(r["test"])]
    for r in loose[:shown]:
        print(f"  unattributed failure: {_failure_reason(r)}")
        if ran(r):
            print(f"    it ran {', '.join(ran(r))}; nothing in the failure points at one of them "
                  f"(`make check V=1` shows the whole of it)")
    if len(loose) > shown:
        print(f"  ... and {len(loose) - shown} more unattributed failures")


def unfinished_earlier(n: int) -> list[tuple[Chapter, list[str]]]:
    """(chapter, stubs still raising NotImplementedError) of every earlier chapter the learner's engine uses."""
    out = []
    for ch in all_chapters():
        if ch.number >= n or ch.slug in STANDALONE:
            continue
        left = [s.qualname for s in skeleton.stubs_of(ch)
                if (ch.skeleton_dir / s.path).exists() and s.ident in (ch.skeleton_dir / s.path).read_text()]
        if left:
            out.append((ch, left))
    return out


def _print_unfinished(n: int) -> None:
    left = unfinished_earlier(n)
    if not left:
        return
    total = sum(len(stubs) for _, stubs in left)
    print(f"\nyour engine (MINE=1) still has {total} unimplemented stubs in {len(left)} earlier chapters:")
    for ch, stubs in left:
        shown = ", ".join(stubs[:4]) + (f", ... ({len(stubs) - 4} more)" if len(stubs) > 4 else "")
        print(f"  ch{ch.number:02d} {ch.title}: {shown}")


COLORS = {"done": "32", "failing": "31", "not started": "33", "untested": "35", "unclear": "36"}


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
                                      extra=[f"--timeout={check_timeout()}", "--stub-entries",
                                             *(["-v"] if verbose else [])],
                                      quiet=not verbose)
    rows = stub_status(skeleton.stubs_of(ch), records, None if sol else ch.skeleton_dir)
    width = max((len(r[0]) for r in rows), default=10)
    print(f"\n{'TODO stub':<{width}}  status       detail")
    for name, status, detail, explanation in rows:
        print(f"{name:<{width}}  {_color(f'{status:<11}', status)}  {detail}")
        for line in explanation:  # pytest's words for what differs
            print(f"{'':<{width}}    | {line}")
    passed = sum(r["outcome"] == "passed" for r in records)
    failed = [r for r in records if r["outcome"] == "failed"]
    skipped = [r for r in records if r["outcome"] == "skipped"]
    print(f"\ntests: {passed} passed, {len(failed)} failed, {len(skipped)} skipped ({time.time() - t0:.1f} s)")
    reasons: dict[str, int] = {}
    for r in skipped:
        reasons[r.get("message", "")] = reasons.get(r.get("message", ""), 0) + 1
    for reason, count in reasons.items():  # each reason once
        print(f"  {count} skipped: {reason or 'no reason given'}")
    print_unattributed(failed, blame(records, [s.qualname for s in skeleton.stubs_of(ch)]))
    if mine:
        _print_unfinished(n)
    if code != 0:
        if code not in (0, 1) and not records:
            print(output[-3000:])
        print(f"\nchapter {n} is not passing yet. `make check CH={n} V=1` shows the full pytest output.")
        _trace_hint(n, mine)
        return 1
    # Stubs whose every test skipped here (Triton's kernels on a Mac): the chapter passes what this machine can run.
    unchecked = [name for name, status, _, _ in rows
                 if status in ("untested", "not started") and _all_skipped(name, records)]
    print(f"\nchapter {n}'s tests {'that run here ' if unchecked else ''}pass. Its example:\n", flush=True)
    code = cmd_run(n, sol=sol, mine=mine, tree=tree)
    if code != 0:
        script = _shown(main_script(ch, sol))
        print(f"\nchapter {n} is not passing yet: its tests pass, but its example {script} failed (exit code "
              f"{code}; its output is above). The example does things the tests do not: find the error there.")
        _trace_hint(n, mine)
        return 1
    if unchecked:
        print(f"\nchapter {n} passes what runs on this machine: its tests that run here and its example. Not checked "
              f"here: {', '.join(unchecked)} (the table says what they need).")
        return 0
    print(f"\nchapter {n} passes: its tests and its example.")
    return 0


def _trace_hint(n: int, mine: bool) -> None:
    from tools.trace import FIRST_CHAPTER

    if n >= FIRST_CHAPTER:
        print(f"`make trace CH={n}{' MINE=1' if mine else ''}` records the example step by step on your engine and "
              "shows the first step that differs from the reference (the book's trace player plays both).")


# ----------------------------------------------------------------------------- run
def main_script(ch: Chapter, sol: bool) -> Path:
    return (ch.solution_dir if sol else ch.skeleton_dir) / "main.py"


def run_script(script: Path, tree: Path, args: list[str] | None = None) -> int:
    """Run a learner-facing program on a tree, saying where and on how many threads."""
    check_model_env()
    env = tree_env(tree)
    print(f"== {_shown(script)} on {_shown(tree)}, {threads_note(env)}", flush=True)
    return subprocess.run([sys.executable, str(script), *(args or [])], cwd=ROOT, env=env).returncode


def check_model_env() -> None:
    """Fail at once, in one line, on a $MODEL that names no model (before a child spends seconds importing torch)."""
    from tools.models import model_problem

    name = os.environ.get("MODEL")
    if name and (problem := model_problem(name)):
        raise ValueError(f"MODEL={name}: {problem}")


def cmd_run(n: int, sol: bool, mine: bool = False, tree: Path | None = None, args: list[str] | None = None) -> int:
    ch = get_chapter(n)
    tree = tree or assemble(n, "ref" if sol else ("mine" if mine else "learner"))
    script = main_script(ch, sol)
    if not script.exists():
        print(f"chapter {n} has no main.py")
        return 1
    return run_script(script, tree, args)


# ----------------------------------------------------------------------------- lab
def cmd_lab(n: int, sol: bool, mine: bool, args: list[str] | None = None) -> int:
    """JupyterLab on 127.0.0.1 (no browser opened), its kernels importing the same tree `make check` uses."""
    from tools.notebooks import kernel_env

    tree = assemble(n, "ref" if sol else ("mine" if mine else "learner"))
    env = kernel_env(tree_env(tree))
    print(f"== JupyterLab, chapter {n} tree: {tree.relative_to(ROOT)}, {threads_note(env)} (open the URL with the "
          "token below; notebooks/ holds the stage milestones; Ctrl-C stops it)", flush=True)
    cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", "--no-browser", f"--ServerApp.root_dir={ROOT}",
           *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []), *(args or [])]
    # This process becomes JupyterLab (same pid): a signal that stops `make lab` stops the server, no orphan.
    os.chdir(ROOT)
    os.execve(sys.executable, cmd, env)


# ----------------------------------------------------------------------------- serve
SERVER_CHAPTER = 15  # the first chapter whose tree has `python -m minisgl.server`
DP_CHAPTER = 27  # the first chapter whose tree has `python -m minisgl.router` (N servers behind sglang-router)
PD_CHAPTER = 29  # the first chapter whose tree has `python -m minisgl.router.pd` (prefill and decode servers)


def cmd_serve(n: int | None, sol: bool, mine: bool, args: list[str] | None = None, dp: int | None = None,
              pd: bool = False) -> int:
    """The OpenAI-compatible server (and its chat page) on $MODEL, default the bundled SmolLM2, with chapter n's
    tree importable (no n: the final reference tree). This process becomes the server: Ctrl-C stops it and its
    workers. With dp: chapter 27's launcher instead, dp servers behind sglang-router (args name the router); with pd:
    chapter 29's, a prefill server and a decode server behind sglang-router in prefill/decode mode."""
    from tools.models import model_path_from_env

    if n is not None and n < SERVER_CHAPTER:
        raise ValueError(f"chapter {n}'s tree has no server: it arrives in chapter {SERVER_CHAPTER} "
                         f"(make serve CH={SERVER_CHAPTER} or later, or no CH for the finished engine)")
    if dp is not None and n is not None and n < DP_CHAPTER:
        raise ValueError(f"chapter {n}'s tree has no data-parallel launcher: it arrives in chapter {DP_CHAPTER} "
                         f"(make serve DP={dp} CH={DP_CHAPTER} or later, or no CH)")
    if pd and n is not None and n < PD_CHAPTER:
        raise ValueError(f"chapter {n}'s tree has no prefill/decode servers: they arrive in chapter {PD_CHAPTER} "
                         f"(make serve PD=1 CH={PD_CHAPTER} or later, or no CH)")
    check_model_env()
    tree = assemble(all_chapters()[-1].number if n is None else n,
                    "ref" if sol or n is None else ("mine" if mine else "learner"))
    model = model_path_from_env()
    env = tree_env(tree)
    print(f"== the server on {_shown(tree)}, model {_shown(model)}, {threads_note(env)}", flush=True)
    cmd = [sys.executable, "-m", "minisgl.server", "--model", str(model), *(args or [])]
    if dp is not None:
        cmd = [sys.executable, "-m", "minisgl.router", "--dp", str(dp), "--model", str(model), *(args or [])]
    if pd:
        cmd = [sys.executable, "-m", "minisgl.router.pd", "--model", str(model), *(args or [])]
    os.chdir(ROOT)
    os.execve(sys.executable, cmd, env)


EXAMPLES = ROOT / "examples"
OUTPUTS = ROOT / "docs" / "outputs"
IMAGES = ROOT / "docs" / "assets" / "images"


def cmd_example(name: str, args: list[str] | None = None) -> int:
    """Run examples/<name>.py on the final reference tree (the whole engine as it stands)."""
    script = EXAMPLES / f"{name}.py"
    if not script.exists():
        known = ", ".join(sorted(p.stem for p in EXAMPLES.glob("*.py")))
        raise ValueError(f"no example {name!r} (examples: {known})")
    return run_script(script, assemble(all_chapters()[-1].number, "ref"), args)


def capture(script: Path, tree: Path, threads: int | None = None) -> str:
    """Run a script on a tree and return what it printed; raise if it fails."""
    env = tree_env(tree, threads)
    env["MINISGL_QUIET"] = "1"  # no progress bars in stored outputs
    code, out, err = run_python([str(script)], env)
    if code != 0:
        raise RuntimeError(f"{script.relative_to(ROOT)} failed:\n{out}\n{err}")
    return out


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
    get_chapter(n)  # a planned or unknown chapter says so
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


BACKUPS = BUILD / "backups"


def _backup(ch: Chapter) -> Path | None:
    """Copy the learner's chapter folder under build/backups, unless it is the pristine skeleton."""
    if not ch.skeleton_dir.exists() or not skeleton.edited_files(ch):
        return None
    backup = BACKUPS / f"{ch.slug}-{time.strftime('%Y%m%d-%H%M%S')}"
    while backup.exists():  # two saves within one second
        backup = backup.with_name(backup.name + "+")
    shutil.copytree(ch.skeleton_dir, backup, ignore=shutil.ignore_patterns("__pycache__"))
    return backup


def backups_of(ch: Chapter) -> list[Path]:
    """The chapter's backups, oldest first (names carry the time they were made)."""
    return sorted(BACKUPS.glob(f"{ch.slug}-*")) if BACKUPS.is_dir() else []


def cmd_reset(n: int) -> int:
    ch = get_chapter(n)
    backup = _backup(ch)
    if backup:
        print(f"saved your chapter {n} files to {_shown(backup)} (`make restore CH={n}` brings them back)")
    skeleton.write(ch, force=True)
    print(f"chapters/{ch.slug} is a pristine skeleton again")
    return 0


def cmd_restore(n: int) -> int:
    """Bring back the latest backup of chapter n (what `make reset` saved), saving the current files first."""
    ch = get_chapter(n)
    backups = backups_of(ch)
    if not backups:
        print(f"no backup of chapter {n} under {_shown(BACKUPS)}: `make reset CH={n}` makes one")
        return 1
    latest = backups[-1]
    saved = _backup(ch)
    if ch.skeleton_dir.exists():
        shutil.rmtree(ch.skeleton_dir)
    shutil.copytree(latest, ch.skeleton_dir)
    print(f"restored chapters/{ch.slug} from {_shown(latest)}")
    if saved:
        print(f"(the files it replaced are saved in {_shown(saved)})")
    if len(backups) > 1:
        print("older backups: " + ", ".join(b.name for b in backups[:-1]))
    return 0


def chapter_state(ch: Chapter) -> str:
    stubs = skeleton.stubs_of(ch)
    remaining = [s for s in stubs if s.ident in (ch.skeleton_dir / s.path).read_text()] if stubs else []
    if stubs and len(remaining) == len(stubs):
        return "not started"
    tree = assemble(ch.number, "learner")
    code, _, _ = run_suite(ch, tree, BUILD / "reports" / f"{ch.tag}-progress.jsonl")
    return "passing" if code == 0 else "in progress"


# The book's stages, by their first chapter (docs/index.md): `make progress` groups the chapters under them.
STAGES = {0: "Stage 0: a tiny engine", 1: "Stage 1: compute it right", 7: "Stage 2: schedule well",
          12: "Stage 3: serve it", 16: "Stage 4: faster and bigger", 23: "Stage 5: beyond mini-sglang",
          27: "Stage 6: serve at scale"}


def cmd_progress() -> int:
    for ch in all_chapters():
        if ch.number in STAGES:
            print(STAGES[ch.number])
        state = chapter_state(ch)
        print(f"  ch{ch.number:02d}  {ch.title:<22} {_color(state, {'passing': 'done', 'in progress': 'failing'}.get(state, 'not started'))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.course", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("check", "run", "lab", "diff", "reset", "restore", "tree"):
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
    # Every option the server takes passes through, so the chapter is an option too (a bare number would be
    # taken for the chapter) and no prefix of a server flag is read as one of these.
    serve = sub.add_parser("serve", allow_abbrev=False)
    serve.add_argument("--ch", type=int, default=None, help="the chapter whose tree serves (default: the final "
                       "reference)")
    serve.add_argument("--sol", action="store_true", help="the reference tree of chapter CH")
    serve.add_argument("--mine", action="store_true", help="your files of every chapter <= CH")
    serve.add_argument("--dp", type=int, default=None, help="chapter 27: this many servers behind sglang-router")
    serve.add_argument("--pd", action="store_true", help="chapter 29: a prefill and a decode server behind sglang-router")
    a, rest = ap.parse_known_args(argv)
    if rest and a.cmd not in ("run", "example", "lab", "serve"):
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
        if a.cmd == "serve":
            return cmd_serve(a.ch, a.sol, a.mine, args=rest, dp=a.dp, pd=a.pd)
        if a.cmd == "diff":
            return cmd_diff(a.ch)
        if a.cmd == "reset":
            return cmd_reset(a.ch)
        if a.cmd == "restore":
            return cmd_restore(a.ch)
        if a.cmd == "tree":
            print(assemble(a.ch, a.kind or ("ref" if a.sol else "learner")))
            return 0
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
