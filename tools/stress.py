"""Maintainer tool: the server tests, again and again, beside a CPU hog. A test that relies on timing (requests
arriving together, an idle machine) fails here sooner or later; one that builds its state (a paused scheduler, a
barrier) does not.

    python -m tools.stress                          # 10 rounds, 2 busy loops: chapters 15, 23-26 on both trees
    python -m tools.stress --runs 3 --hogs 0 --trees final --chapters 23

One round runs, for each tree (`ref`: each chapter's reference tree; `final`: the last chapter's) and chapter, the
chapter's server tests: all of chapter 15's suite, and in the other chapters the tests that start a server (they use
a `server`, `servers` or `client` fixture, or name a server). Each suite run is one line of a JSON-lines log under
build/stress/; the summary gives runs, failures (by test) and time. Not part of `make test`: it takes hours.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tools.tree import BUILD, all_chapters, get_chapter

CHAPTERS = (15, 23, 24, 25, 26)
SERVER_FIXTURES = {"server", "servers", "client"}
HOG = "while True: pass"


# ---- as a pytest plugin (-p tools.stress): keep the tests that start a server ---------------------------------------
def starts_a_server(item) -> bool:
    module = Path(str(item.fspath)).name
    return module.startswith("test_ch15_") or bool(SERVER_FIXTURES & set(item.fixturenames)) or \
        "server" in item.name


def pytest_collection_modifyitems(config, items):
    kept = [item for item in items if starts_a_server(item)]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept


# ---- the driver -------------------------------------------------------------------------------------------------
def run_once(n: int, tree_kind: str, log: Path) -> dict:
    """One run of chapter n's server tests on a tree: a record of its outcome."""
    from tools import course

    ch = get_chapter(n)
    tree = course.assemble(n if tree_kind == "ref" else all_chapters()[-1].number, "ref")
    report = log.with_suffix(f".{ch.tag}-{tree_kind}.jsonl")
    t0 = time.monotonic()
    code, records, output = course.run_suite(ch, tree, report, extra=["-p", "tools.stress"])
    failed = [r for r in records if r["outcome"] == "failed"]
    return {"chapter": n, "tree": tree_kind, "exit": code, "seconds": round(time.monotonic() - t0, 1),
            "passed": sum(r["outcome"] == "passed" for r in records), "skipped": sum(r["outcome"] == "skipped"
                                                                                     for r in records),
            "failed": [f"{r['test']}: {r.get('error', '')}: {r.get('message', '')}"[:300] for r in failed],
            "output": output[-2000:] if code not in (0, 1) else ""}


def summary(records: list[dict]) -> str:
    lines = [f"{'chapter':<8}{'tree':<7}{'runs':>5}{'failed':>8}{'tests':>7}{'median s':>10}{'max s':>8}"]
    for key in sorted({(r["chapter"], r["tree"]) for r in records}):
        runs = [r for r in records if (r["chapter"], r["tree"]) == key]
        seconds = sorted(r["seconds"] for r in runs)
        bad = sum(r["exit"] != 0 for r in runs)
        lines.append(f"ch{key[0]:<6}{key[1]:<7}{len(runs):>5}{bad:>8}{runs[-1]['passed']:>7}"
                     f"{seconds[len(seconds) // 2]:>10.1f}{seconds[-1]:>8.1f}")
    failures: dict[str, int] = {}
    for r in records:
        for f in r["failed"] or ([f"exit code {r['exit']}"] if r["exit"] else []):
            failures[f"ch{r['chapter']} {r['tree']}: {f}"] = failures.get(f"ch{r['chapter']} {r['tree']}: {f}", 0) + 1
    total = sum(r["exit"] != 0 for r in records)
    lines.append(f"\n{len(records)} suite runs, {total} failed, {sum(r['seconds'] for r in records) / 60:.1f} min")
    lines += [f"  {count}x {what}" for what, count in sorted(failures.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.stress", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="rounds (default 10)")
    ap.add_argument("--hogs", type=int, default=2, help="busy-loop processes beside the tests (default 2)")
    ap.add_argument("--trees", default="ref,final", help="ref (each chapter's reference tree), final, or both")
    ap.add_argument("--chapters", default=",".join(map(str, CHAPTERS)))
    ap.add_argument("--log", type=Path, default=None, help="the JSON-lines log (default build/stress/<time>.jsonl)")
    a = ap.parse_args(argv)
    chapters = [int(c) for c in a.chapters.split(",")]
    trees = a.trees.split(",")
    log = a.log or BUILD / "stress" / time.strftime("%Y%m%d-%H%M%S.jsonl")
    log.parent.mkdir(parents=True, exist_ok=True)
    final = all_chapters()[-1].number
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(a.hogs)]
    print(f"stress: {a.runs} rounds of chapters {chapters} on trees {trees}, {len(hogs)} busy loops beside them "
          f"({os.cpu_count()} CPUs); log {log}", flush=True)
    records: list[dict] = []
    stop: list[int] = []  # Ctrl-C or SIGTERM: stop after the suite that runs (its servers stop with it)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    t0 = time.monotonic()
    try:
        for run in range(1, a.runs + 1):
            for kind in trees:
                for n in chapters:
                    if stop:
                        raise KeyboardInterrupt
                    if kind == "final" and n == final and "ref" in trees:
                        continue  # the final tree is this chapter's reference tree
                    record = {"run": run, **run_once(n, kind, log)}
                    records.append(record)
                    with log.open("a") as f:
                        f.write(json.dumps(record) + "\n")
                    state = "ok" if record["exit"] == 0 else f"FAILED {record['failed'] or record['exit']}"
                    print(f"[{time.monotonic() - t0:7.0f} s] round {run} ch{n} {kind}: {record['passed']} passed, "
                          f"{record['seconds']:.0f} s, {state}", flush=True)
    except KeyboardInterrupt:
        print("stopped", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print("\n" + summary(records))
    return 1 if any(r["exit"] != 0 for r in records) else 0


if __name__ == "__main__":
    raise SystemExit(main())
