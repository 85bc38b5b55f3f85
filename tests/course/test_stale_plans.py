"""No page, docstring or comment still calls a built chapter "planned": a sentence that puts "planned", "will be
built", "not yet written" (or the Chinese 计划中 / 尚未) next to the number of a chapter that exists is stale."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tools.tree import ROOT, all_chapters, last_chapter

# What the course ships as text a reader meets: code, docstrings, comments, pages, notebooks.
ROOTS = ["solutions", "chapters", "tools", "tests", "docs", "benchmark", "examples", "practice", "notebooks"]
TOP_FILES = ["README.md", "README.zh.md", "CONTRIBUTING.md", "CONTRIBUTING.zh.md", "Makefile"]
SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".ipynb", ".txt"}
SKIPPED_PARTS = {"vendor", "__pycache__", "data"}  # bundled third-party assets, tokenizer training text

# "chapter 21", "chapters 21", "ch 21", "ch21", "第 21 章" (not "第 9 列"); {} names the number's group.
CHAPTER = r"(?:\b(?:chapters?|ch\.?)\s*|第\s*(?=\d{{1,2}}\s*章))(?P<{}>\d{{1,2}})(?!\d)(?:\s*章)?"
STALE = r"(?:planned|will be built|not yet (?:written|built)|not (?:written|built) yet|计划中|尚未)"
# "Next to": inside one clause, a few words apart. The gap may cross a line break (and a comment's `#`), never
# the end of a sentence.
GAP = r"[^.;:!?。；：！？]{0,40}?"
NEAR = re.compile(rf"{CHAPTER.format('before')}{GAP}{STALE}|{STALE}{GAP}{CHAPTER.format('after')}", re.IGNORECASE)


def stale_mentions(text: str, chapters: set[int]) -> list[tuple[int, str]]:
    """(line, the matched words) for every stale phrase next to the number of a chapter in `chapters`."""
    found = []
    for m in NEAR.finditer(text):
        if int(m.group("before") or m.group("after")) in chapters:
            found.append((text.count("\n", 0, m.start()) + 1, " ".join(m.group(0).split())))
    return found


def _course_files() -> list[Path]:
    files = [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]
    for top in ROOTS:
        for folder, subfolders, names in os.walk(ROOT / top):
            subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED_PARTS)  # never walk vendored assets
            files += [Path(folder) / n for n in sorted(names) if Path(n).suffix in SUFFIXES]
    return [p for p in files if p != Path(__file__).resolve()]


def test_no_built_chapter_is_called_planned():
    built = {ch.number for ch in all_chapters()}
    assert last_chapter() in built
    stale = [f"{path.relative_to(ROOT)}:{line}: {words!r}"
             for path in _course_files()
             for line, words in stale_mentions(path.read_text(encoding="utf-8", errors="replace"), built)]
    assert not stale, "built chapters still called planned or unwritten:\n" + "\n".join(stale)


@pytest.mark.parametrize("text", [
    "is the job of chapter 21 (planned).",
    "riding decodes along a chunk is the job of\n# chapter 21 (Planned).",
    "the planned chapter 21 adds it",
    "Chapter 7 will be built on top of it",
    "见第 21 章（计划中）",
    "尚未写的第 21 章",
    "see ch21 (not yet written)",
])
def test_the_check_sees_a_stale_mention(text):
    assert stale_mentions(text, {21, 7}), f"missed: {text!r}"


@pytest.mark.parametrize("text", [
    "chapter 33 (planned)",              # not a chapter of the course: a plan may say so
    "chapter 21 mixes them. It was planned long ago",  # another sentence
    "slots allocated but not yet written.",            # no chapter at all
    "一个带文法、尚未完成的 prompt 分块",
    "第 9 到 11 列指向已分配但尚未写入的槽位",         # columns, not chapters
    "chapter 17 follows 11 when 12-16 are not built",  # a plain "not built" is no promise
])
def test_the_check_leaves_true_sentences_alone(text):
    assert not stale_mentions(text, {21, 7}), f"flagged: {text!r}"
