"""Chapter discovery and the reference-tree overlay (design, section 3).

The reference tree at chapter N is the overlay of solutions/ch00..chN: for every path, the copy
from the highest chapter <= N that has it. Chapters that do not exist yet are simply skipped.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
# The learner workspace; MINISGL_CHAPTERS_DIR points elsewhere (the course's own tests use a copy).
CHAPTERS = Path(os.environ.get("MINISGL_CHAPTERS_DIR", ROOT / "chapters"))
BUILD = ROOT / "build"

# Files of a chapter folder that belong to the chapter, not to the package tree.
CHAPTER_ONLY = {"main.py", "README.md", ".skeleton-manifest.json"}
IGNORED_PARTS = {"__pycache__", ".pytest_cache"}
# Chapters whose files stand alone (chapter 0's single-file engine): in their own tree, not in later ones.
STANDALONE = {"ch00_tiny_engine"}

BEGIN_MARK = re.compile(r"^\s*# >>> solution\s*$")
END_MARK = re.compile(r"^\s*# <<< solution\s*$")
TODO_LINE = re.compile(r"^\s*# TODO\((ch\d\d)\):")

# The design's chapter plan (section 6): chapters that are planned but not built yet. A command naming one
# says so instead of "does not exist"; tests/course/test_tooling.py keeps this table and solutions/ apart.
PLANNED = {
}


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str  # e.g. "ch03_models"

    @property
    def solution_dir(self) -> Path:
        return SOLUTIONS / self.slug

    @property
    def skeleton_dir(self) -> Path:
        return CHAPTERS / self.slug

    @property
    def tag(self) -> str:
        return f"ch{self.number:02d}"

    @property
    def title(self) -> str:
        return self.slug.split("_", 1)[1].replace("_", " ")


def all_chapters() -> list[Chapter]:
    found = []
    for d in sorted(SOLUTIONS.glob("ch[0-9][0-9]_*")):
        if d.is_dir():
            found.append(Chapter(int(d.name[2:4]), d.name))
    return found


def get_chapter(n: int) -> Chapter:
    for ch in all_chapters():
        if ch.number == n:
            return ch
    known = ", ".join(str(c.number) for c in all_chapters())
    if n in PLANNED:
        raise ValueError(f"chapter {n} is planned (not built yet): {PLANNED[n]} (built chapters: {known})")
    raise ValueError(f"chapter {n} does not exist (chapters: {known})")


def chapter_files(folder: Path) -> dict[str, Path]:
    """Relative path -> file, for every package file of one chapter folder."""
    out: dict[str, Path] = {}
    if not folder.is_dir():
        return out
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if not p.is_file() or IGNORED_PARTS & set(rel.parts) or p.suffix == ".pyc":
            continue
        if len(rel.parts) == 1 and rel.name in CHAPTER_ONLY:
            continue
        out[rel.as_posix()] = p
    return out


def overlay(n: int, folder_of: Callable[[Chapter], Path], tree_of: int | None = None) -> dict[str, Path]:
    """For every path, the copy from the highest chapter <= n that has it, reading folder_of(chapter).

    The tree is for chapter `tree_of` (default n): a standalone chapter's files only belong to its own tree.
    """
    tree_of = n if tree_of is None else tree_of
    tree: dict[str, Path] = {}
    for ch in all_chapters():
        if ch.number <= n and (ch.slug not in STANDALONE or ch.number == tree_of):
            tree.update(chapter_files(folder_of(ch)))
    return tree


def reference_files(n: int, tree_of: int | None = None) -> dict[str, Path]:
    """The overlay of solutions/ch00..chN."""
    return overlay(n, lambda ch: ch.solution_dir, tree_of)


def last_chapter() -> int:
    chapters = all_chapters()
    return chapters[-1].number if chapters else 0


def strip_markers(text: str) -> str:
    """The reference code as a reader sees it: marker lines removed, everything else kept."""
    return "".join(
        line for line in text.splitlines(keepends=True) if not (BEGIN_MARK.match(line) or END_MARK.match(line))
    )
