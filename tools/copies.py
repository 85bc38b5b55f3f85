"""Chapter copies of a file: solutions/chNN_*/PATH for every chapter that creates or changes PATH.

A bug fixed in one copy is usually in every later copy too, so a maintainer lists them before fixing:

    make copies P=minisgl/engine/engine.py     # each copy, oldest first, and how many lines its chapter changed
    make copies                                # every path that has more than one copy
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tools.tree import ROOT, Chapter, all_chapters, chapter_files, strip_markers


def copies_of(rel: str) -> list[tuple[Chapter, Path]]:
    """(chapter, file) for every chapter whose solution folder holds `rel`, oldest first."""
    return [(ch, ch.solution_dir / rel) for ch in all_chapters() if (ch.solution_dir / rel).is_file()]


def _lines(path: Path) -> list[str]:
    return strip_markers(path.read_text(encoding="utf-8")).splitlines()


def changed_lines(old: Path, new: Path) -> tuple[int, int]:
    """(added, removed) lines from one copy to the next, solution markers aside."""
    added = removed = 0
    for line in difflib.unified_diff(_lines(old), _lines(new), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return added, removed


def describe(rel: str) -> str:
    found = copies_of(rel)
    if not found:
        raise ValueError(f"no chapter of solutions/ has {rel} (paths look like minisgl/engine/engine.py)")
    rows = [f"{rel}: {len(found)} cop{'y' if len(found) == 1 else 'ies'}, oldest first"]
    previous = None
    for ch, path in found:
        size = len(_lines(path))
        if previous is None:
            change = "new"
        else:
            added, removed = changed_lines(previous[1], path)
            change = f"+{added} -{removed} against {previous[0].slug}"
        rows.append(f"  {ch.slug:<22} {path.relative_to(ROOT).as_posix():<60} {size:>4} lines  {change}")
        previous = (ch, path)
    if len(found) > 1:
        rows.append("A fix in one copy is needed in every later copy that still has the same lines.")
    return "\n".join(rows)


def multi_copy_paths() -> dict[str, int]:
    """Every path with more than one chapter copy, and how many it has."""
    counts: dict[str, int] = {}
    for ch in all_chapters():
        for rel in chapter_files(ch.solution_dir):
            counts[rel] = counts.get(rel, 0) + 1
    return {rel: n for rel, n in sorted(counts.items()) if n > 1}


def cmd_copies(rel: str | None) -> int:
    if rel:
        print(describe(rel.removeprefix("./")))
        return 0
    paths = multi_copy_paths()
    print(f"{len(paths)} paths have more than one chapter copy (make copies P=<path> lists them):")
    for path, n in paths.items():
        print(f"  {n}  {path}")
    return 0
