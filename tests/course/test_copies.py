"""`make copies` lists every chapter copy of a path (and their total), and `make diff` labels the chapters a copy comes
from. No chapter copy grows past COPY_LIMIT lines without a reason recorded in tools/data/long_copies.yml."""

from __future__ import annotations

import contextlib
import io

import pytest

from tools.copies import (COPY_LIMIT, LONG_COPIES, copies_of, copies_over_limit, copy_lines, copy_totals, describe,
                          long_copies, multi_copy_paths)
from tools.course import cmd_diff
from tools.tree import all_chapters


def test_copies_are_every_chapter_that_has_the_path_oldest_first():
    rel = "minisgl/engine/engine.py"
    want = [ch.slug for ch in all_chapters() if (ch.solution_dir / rel).is_file()]
    got = [ch.slug for ch, _ in copies_of(rel)]
    assert got == want and len(got) >= 2, f"copies of {rel}: {got}, solutions/ has {want}"
    text = describe(rel)
    assert all(slug in text for slug in want) and "new" in text.splitlines()[1], text


def test_the_total_of_a_paths_copies_is_the_sum_of_its_copies():
    rel = "minisgl/scheduler/scheduler.py"
    found = copies_of(rel)
    total = sum(copy_lines(path) for _, path in found)
    assert copy_totals()[rel] == (len(found), total, max(copy_lines(path) for _, path in found))
    assert f"{total} lines in {len(found)} copies" in describe(rel), describe(rel)


def test_no_chapter_copy_is_longer_than_the_limit_without_a_reason():
    over, reasons = copies_over_limit(), long_copies()
    missing = sorted(f"{slug}/{rel}: {lines} lines" for (rel, slug), lines in over.items() if (rel, slug) not in reasons)
    assert not missing, (f"chapter copies longer than {COPY_LIMIT} lines: split the file (so the next chapter that "
                         f"changes it ships a small copy), or record why it may be in {LONG_COPIES.name}:\n"
                         + "\n".join(missing))
    stale = sorted(f"{slug}/{rel}" for rel, slug in reasons if (rel, slug) not in over)
    assert not stale, f"{LONG_COPIES.name} gives reasons for copies that are no longer over the limit: {stale}"
    empty = sorted(f"{slug}/{rel}" for (rel, slug), why in reasons.items() if not why.strip())
    assert not empty, f"{LONG_COPIES.name}: entries without a reason: {empty}"


def test_the_limit_catches_a_copy_one_line_too_long(tmp_path):
    for slug, lines in (("ch90_at_limit", COPY_LIMIT), ("ch91_over", COPY_LIMIT + 1)):
        path = tmp_path / slug / "minisgl" / "big.py"
        path.parent.mkdir(parents=True)
        path.write_text("".join(f"x{i} = {i}\n" for i in range(lines)) + "# >>> solution\n# <<< solution\n")
    found = copies_over_limit({p.name: p for p in tmp_path.iterdir()})
    assert found == {("minisgl/big.py", "ch91_over"): COPY_LIMIT + 1}, \
        f"a copy of {COPY_LIMIT} lines (markers aside) is at the limit, one of {COPY_LIMIT + 1} over it: {found}"


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
