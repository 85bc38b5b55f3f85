"""`make trace CH=N`: chapter N's example, recorded step by step on your tree, compared with the reference.

    python -m tools.trace record N [--sol | --mine]   the example of chapter N (as `make run CH=N` runs it) with
                                                      every scheduler it makes traced, into build/traces/chNN.json
                                                      (-sol / -mine); then the first step where your trace and
                                                      the reference's differ
    python -m tools.trace diff MINE.json REF.json     the first differing step of two traces
    python -m tools.trace validate FILE.json ...      check files against the schema (docs/assets/traces/schema.json)
    python -m tools.trace book                        the reference traces the book plays (docs/assets/traces/)

The recorder (tools/trace_recorder.py) attaches from the outside, so the engine pays nothing when no trace is
recorded. The book's trace player (docs/trace_player.md) opens these files and shows the same difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tools.tree import BUILD, ROOT, get_chapter, reference_files
from tools.trace_diff import engine_label, first_difference, signatures
from tools.trace_recorder import TRACE_SCHEMA, TRACE_VERSION

TRACES = BUILD / "traces"
BOOK_TRACES = ROOT / "docs" / "assets" / "traces"
SCHEMA = BOOK_TRACES / "schema.json"
FIRST_CHAPTER = 7  # the first tree with a scheduler
BOOK_CHAPTERS = (9, 10, 23, 26)  # a radix-cache hit, chunked prefill, a retraction, speculative decoding
BOOK_LIMIT = 200_000  # bytes per trace the book ships
PLAYER_URL = "http://127.0.0.1:8000/trace_player/"


def trace_path(n: int, kind: str) -> Path:
    return TRACES / f"ch{n:02d}{ {'ref': '-sol', 'mine': '-mine'}.get(kind, '')}.json"


def source_digest(n: int) -> str:
    """What a reference trace depends on: the reference tree, the example, the recorder and the model chosen."""
    h = hashlib.sha256()
    ch = get_chapter(n)
    files = sorted(reference_files(n).items()) + [("main.py", ch.solution_dir / "main.py"),
                                                  ("recorder", ROOT / "tools" / "trace_recorder.py")]
    for rel, path in files:
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(os.environ.get("MODEL", "").encode())
    return h.hexdigest()[:16]


def record(n: int, kind: str, out: Path | None = None) -> tuple[int, Path]:
    """Run chapter n's example on its tree (kind: ref, learner or mine) with the recorder; (exit code, trace)."""
    from tools.course import _shown, assemble, check_model_env, main_script, threads_note, tree_env

    if n < FIRST_CHAPTER:
        raise ValueError(f"chapter {n}'s example has no scheduler to trace: traces start at chapter {FIRST_CHAPTER}")
    ch = get_chapter(n)
    check_model_env()
    tree = assemble(n, kind)
    script = main_script(ch, sol=kind == "ref")
    out = out or trace_path(n, kind)
    meta = {"chapter": n, "tree": kind, "script": _shown(script), "source": source_digest(n) if kind == "ref" else ""}
    env = tree_env(tree)
    env["MINISGL_QUIET"] = "1"  # no progress bars between the example's lines
    print(f"== recording {_shown(script)} on {_shown(tree)}, {threads_note(env)}", flush=True)
    code = subprocess.run([sys.executable, "-m", "tools.trace_recorder", str(out), str(script), json.dumps(meta)],
                          cwd=ROOT, env=env).returncode
    if not out.exists():
        raise RuntimeError(f"the recorder wrote no trace (exit code {code})")
    return code, out


def load(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a trace file ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != TRACE_SCHEMA:
        raise ValueError(f"{path}: not a trace file (no \"schema\": \"{TRACE_SCHEMA}\")")
    if doc.get("version") != TRACE_VERSION:
        raise ValueError(f"{path}: a trace of version {doc.get('version')}; this course reads version {TRACE_VERSION} "
                         "(record it again with `make trace`)")
    errors = validate(doc)
    if errors:
        raise ValueError(f"{path}: " + "; ".join(errors[:3]))
    return doc


def validate(doc: dict) -> list[str]:
    """Where a document breaks the schema (empty: it follows it)."""
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or 'top level'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


def summary(doc: dict) -> str:
    engines = doc["engines"]
    steps = sum(len(e["steps"]) for e in engines)
    return f"{len(engines)} engine{'s' if len(engines) != 1 else ''}, {steps} steps"


def _show(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "(none)"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "(none)"
    return str(value)


def describe_difference(diff: dict, mine: dict, ref: dict, names: tuple[str, str] = ("yours", "reference")) -> str:
    e, i = diff["engine"], diff["step"]
    engines = ref["engines"] if e < len(ref["engines"]) else mine["engines"]
    label = engine_label(engines[e]) if e < len(engines) else ""
    lines = [f"first difference: engine {e} ({label}), step {i}"]
    steps = mine["engines"][e]["steps"] if e < len(mine["engines"]) else []
    if i < len(steps) and steps[i].get("error"):
        lines.append(f"  {names[0]}: the run stopped here: {steps[i]['error']}")
    width = max(len(n) for n in names)
    for field, (a, b) in diff["fields"].items():
        lines.append(f"  {field}:")
        lines.append(f"    {names[0]:<{width}}  {_show(a)}"[:240])
        lines.append(f"    {names[1]:<{width}}  {_show(b)}"[:240])
    if e < len(mine["engines"]) and i > 0:
        before = signatures(mine["engines"][e])[: i][-1]
        lines.append(f"  the step before (the same in both): {before['phase']} " + _show(before["batch"])[:160])
    return "\n".join(lines)


def compare(mine_path: Path, ref_path: Path) -> int:
    mine, ref = load(mine_path), load(ref_path)
    diff = first_difference(mine, ref)
    if diff is None:
        print(f"every step agrees ({summary(mine)})")
        return 0
    print(describe_difference(diff, mine, ref))
    return 1


def _reference(n: int) -> Path:
    """The reference trace of chapter n: recorded again only when the reference or the recorder changed."""
    path = trace_path(n, "ref")
    if path.exists():
        try:
            if json.loads(path.read_text()).get("source") == source_digest(n):
                return path
        except json.JSONDecodeError:
            pass
    print("\n== the reference's trace (recorded once; again when the reference changes)", flush=True)
    code, path = record(n, "ref")
    if code != 0:
        raise RuntimeError(f"chapter {n}'s example failed on the reference tree (exit code {code})")
    return path


def cmd_record(n: int, sol: bool, mine: bool) -> int:
    kind = "ref" if sol else ("mine" if mine else "learner")
    code, path = record(n, kind)
    doc = json.loads(path.read_text())
    errors = validate(doc)
    rel = path.relative_to(ROOT)
    print(f"\n== trace: {rel} ({summary(doc)}, {path.stat().st_size // 1024} KB)"
          + (f"; the example stopped: {doc['exit']['error'] or 'exit code ' + str(code)}" if code else ""))
    if errors:
        print("the trace breaks the schema:\n  " + "\n  ".join(errors[:5]))
        return 1
    if not doc["engines"]:
        print(f"chapter {n}'s example made no scheduler in this process: nothing to trace")
        return code or 1
    if kind == "ref":
        print(f"open it in the book's trace player: `make docs`, then {PLAYER_URL}, and drop {rel} there")
        return code
    ref = _reference(n)
    diff = first_difference(doc, load(ref))
    print()
    if diff is None:
        print(f"every step agrees with the reference ({ref.relative_to(ROOT)})")
    else:
        print(describe_difference(diff, doc, load(ref)))
    print(f"\nsee both step by step: `make docs`, open {PLAYER_URL}, drop {rel} on it and "
          f"{ref.relative_to(ROOT)} on 'compare with'")
    return code or (1 if diff else 0)


def cmd_book() -> int:
    """Record the reference traces the book plays into docs/assets/traces/ (each must stay under BOOK_LIMIT)."""
    BOOK_TRACES.mkdir(parents=True, exist_ok=True)
    status = 0
    for n in BOOK_CHAPTERS:
        out = BOOK_TRACES / f"ch{n:02d}.json"
        code, _ = record(n, "ref", out)
        doc = json.loads(out.read_text())
        doc["source"] = ""  # the book's copy: no digest, so a rebuild changes only what the run changed
        out.write_text(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
        size = out.stat().st_size
        errors = validate(doc)
        print(f"{out.relative_to(ROOT)}: {summary(doc)}, {size // 1024} KB" + (f"; exit code {code}" if code else ""))
        if code or errors or size > BOOK_LIMIT:
            print("  " + "; ".join(errors[:3] or [f"over {BOOK_LIMIT // 1000} KB" if size > BOOK_LIMIT else "failed"]))
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.trace", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("ch", type=int)
    rec.add_argument("--sol", action="store_true", help="the reference tree of chapter CH")
    rec.add_argument("--mine", action="store_true", help="your files of every chapter <= CH")
    d = sub.add_parser("diff")
    d.add_argument("mine", type=Path)
    d.add_argument("ref", type=Path)
    sub.add_parser("validate").add_argument("files", type=Path, nargs="+")
    sub.add_parser("book")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "record":
            return cmd_record(a.ch, a.sol, a.mine)
        if a.cmd == "diff":
            return compare(a.mine, a.ref)
        if a.cmd == "validate":
            bad = 0
            for f in a.files:
                try:
                    print(f"{f}: {summary(load(f))}, valid")
                except ValueError as e:
                    print(e)
                    bad = 1
            return bad
        if a.cmd == "book":
            return cmd_book()
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
