"""Chapter copies of a file: solutions/chNN_*/PATH for every chapter that creates or changes PATH.

A bug fixed in one copy is usually in every later copy too, so a maintainer lists them before fixing:

    make copies P=minisgl/engine/engine.py     # each copy, oldest first, how many lines its chapter changed, and the total
    make copies                                # the paths whose copies hold the most lines, then every multi-copy path

A copy longer than COPY_LIMIT lines needs a reason in tools/data/long_copies.yml (tests/course/test_copies.py):
a file that grows that long is split, so that the next chapter that changes it ships a small copy.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tools.tree import ROOT, Chapter, all_chapters, chapter_files, strip_markers

COPY_LIMIT = 500  # lines of one chapter copy, solution markers aside
LONG_COPIES = ROOT / "tools" / "data" / "long_copies.yml"


def copies_of(rel: str) -> list[tuple[Chapter, Path]]:
    """(chapter, file) for every chapter whose solution folder holds `rel`, oldest first."""
    return [(ch, ch.solution_dir / rel) for ch in all_chapters() if (ch.solution_dir / rel).is_file()]


def _lines(path: Path) -> list[str]:
    return strip_markers(path.read_text(encoding="utf-8")).splitlines()


def copy_lines(path: Path) -> int:
    """Lines of one chapter copy, solution markers aside."""
    return len(_lines(path))


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
        size = copy_lines(path)
        if previous is None:
            change = "new"
        else:
            added, removed = changed_lines(previous[1], path)
            change = f"+{added} -{removed} against {previous[0].slug}"
        rows.append(f"  {ch.slug:<22} {path.relative_to(ROOT).as_posix():<60} {size:>4} lines  {change}")
        previous = (ch, path)
    total = sum(copy_lines(path) for _, path in found)
    rows.append(f"  {'total':<22} {'':<60} {total:>4} lines in {len(found)} cop{'y' if len(found) == 1 else 'ies'}")
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


def copy_totals() -> dict[str, tuple[int, int, int]]:
    """path -> (copies, lines in all of them, lines of the longest), for every path of solutions/."""
    totals: dict[str, tuple[int, int, int]] = {}
    for ch in all_chapters():
        for rel, path in chapter_files(ch.solution_dir).items():
            n, total, longest = totals.get(rel, (0, 0, 0))
            size = copy_lines(path)
            totals[rel] = (n + 1, total + size, max(longest, size))
    return totals


def long_copies() -> dict[tuple[str, str], str]:
    """(path, chapter slug) -> the reason recorded for a copy longer than COPY_LIMIT."""
    import yaml

    table = yaml.safe_load(LONG_COPIES.read_text(encoding="utf-8")) or {}
    return {(rel, slug): str(reason) for rel, chapters in table.items() for slug, reason in chapters.items()}


def copies_over_limit(folders: dict[str, Path] | None = None, limit: int = COPY_LIMIT) -> dict[tuple[str, str], int]:
    """(path, chapter slug) -> lines, for every chapter copy longer than `limit`; `folders`: slug -> solution folder
    (default: every chapter's)."""
    folders = {ch.slug: ch.solution_dir for ch in all_chapters()} if folders is None else folders
    return {(rel, slug): size for slug, folder in folders.items() for rel, path in chapter_files(folder).items()
            if (size := copy_lines(path)) > limit}


def cmd_copies(rel: str | None, top: int = 15) -> int:
    if rel:
        print(describe(rel.removeprefix("./")))
        return 0
    totals = copy_totals()
    biggest = sorted(totals.items(), key=lambda item: -item[1][1])[:top]
    print(f"The {top} paths whose chapter copies hold the most lines (copies longer than {COPY_LIMIT} lines need a "
          f"reason in {LONG_COPIES.relative_to(ROOT).as_posix()}):")
    print(f"  {'path':<52} {'copies':>6} {'lines':>6} {'longest':>7}")
    for path, (n, total, longest) in biggest:
        print(f"  {path:<52} {n:>6} {total:>6} {longest:>7}")
    paths = multi_copy_paths()
    print(f"\n{len(paths)} paths have more than one chapter copy (make copies P=<path> lists them):")
    for path, n in paths.items():
        print(f"  {n}  {path}")
    return 0
