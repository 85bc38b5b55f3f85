"""`make copies` lists every chapter copy of a path, and `make diff` labels the chapters a copy comes from."""

from __future__ import annotations

import contextlib
import io

import pytest

from tools.copies import copies_of, describe, multi_copy_paths
from tools.course import cmd_diff
from tools.tree import all_chapters


def test_copies_are_every_chapter_that_has_the_path_oldest_first():
    rel = "minisgl/engine/engine.py"
    want = [ch.slug for ch in all_chapters() if (ch.solution_dir / rel).is_file()]
    got = [ch.slug for ch, _ in copies_of(rel)]
    assert got == want and len(got) >= 2, f"copies of {rel}: {got}, solutions/ has {want}"
    text = describe(rel)
    assert all(slug in text for slug in want) and "new" in text.splitlines()[1], text


def test_every_multi_copy_path_is_listed():
    paths = multi_copy_paths()
    assert paths["minisgl/engine/engine.py"] == len(copies_of("minisgl/engine/engine.py"))
    assert all(n > 1 for n in paths.values())


def test_an_unknown_path_is_a_clear_error():
    with pytest.raises(ValueError, match="no chapter of solutions/ has"):
        describe("minisgl/no_such_file.py")


def test_diff_across_a_numbering_gap_names_the_chapters_the_copies_come_from():
    chapters = [ch.number for ch in all_chapters()]
    gaps = [(a, b) for a, b in zip(chapters, chapters[1:]) if b - a > 1]
    if not gaps:
        pytest.skip("no numbering gap between built chapters")
    before, after = gaps[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cmd_diff(after)
    headers = [line for line in out.getvalue().splitlines() if line.startswith(("--- ", "+++ "))]
    assert headers, f"chapter {after} changes nothing?"
    labels = {line.split()[1].split("/")[0] for line in headers} - {"", "dev"}
    assert f"ch{after:02d}" in labels, headers
    older = sorted(label for label in labels if label != f"ch{after:02d}")
    assert all(int(label[2:]) <= before for label in older), f"labels name chapters that are not built: {older}"
