"""Course integrity checks 1-5 of the design (section 4), one test per chapter and check.

1. every chapter's suite passes on the reference tree at that chapter;
2. ... and on the final reference tree (later chapters never break earlier contracts);
3. on the skeleton tree of chapter N the suite fails, every TODO stub is reached by a failing test, and
   nothing fails for another reason;
4. skeletons are in sync with solutions;
5. every chapter's main.py runs on its reference tree.
"""

from __future__ import annotations

import pytest

from tools import skeleton
from tools.course import assemble, capture, main_script, run_suite
from tools.tree import BUILD, STANDALONE, all_chapters

CHAPTERS = all_chapters()
IDS = [c.slug for c in CHAPTERS]
FINAL = CHAPTERS[-1].number


def _explain(records: list[dict], output: str) -> str:
    failed = [f"{r['test']}: {r.get('error')}: {r.get('message')}" for r in records if r["outcome"] == "failed"]
    return "\n".join(failed[:10]) or output[-4000:]


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_suite_passes_on_reference_tree(ch):
    code, records, output = run_suite(ch, assemble(ch.number, "ref"), BUILD / "reports" / f"{ch.tag}-ref.jsonl",
                                      threads=1)
    assert code == 0, _explain(records, output)
    assert any(r["outcome"] == "passed" for r in records), "the suite ran no test"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_suite_passes_on_final_tree(ch):
    if ch.number == FINAL:
        pytest.skip("the final tree is this chapter's reference tree (checked above)")
    if ch.slug in STANDALONE:
        pytest.skip("a standalone chapter: its files are not part of the package trees of later chapters")
    tree = assemble(FINAL, "ref")
    code, records, output = run_suite(ch, tree, BUILD / "reports" / f"{ch.tag}-final.jsonl", threads=1)
    assert code == 0, _explain(records, output)


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_skeleton_fails_only_because_of_its_stubs(ch):
    stubs = skeleton.stubs_of(ch)
    assert 3 <= len(stubs) <= 8, f"{ch.slug} has {len(stubs)} TODO stubs (the course wants 3-8)"
    code, records, output = run_suite(ch, assemble(ch.number, "skeleton"),
                                      BUILD / "reports" / f"{ch.tag}-skeleton.jsonl", threads=1)
    assert code == 1, f"the skeleton's suite should fail with test failures (pytest exit 1), got {code}:\n{output[-3000:]}"
    failed = [r for r in records if r["outcome"] == "failed"]
    wrong = [r for r in failed if r.get("error") != "NotImplementedError" or not r.get("message", "").startswith(f"TODO({ch.tag})")]
    assert not wrong, "failures other than this chapter's TODO stubs:\n" + _explain(wrong, output)
    reached = {r["message"] for r in failed}
    missing = [s.ident for s in stubs if s.ident not in reached]
    assert not missing, f"TODO stubs no failing test reaches: {missing}"
    marked = {name for r in records for name in r["stubs"]}
    unmarked = [s.qualname for s in stubs if s.qualname not in marked]
    assert not unmarked, f"stubs no test is marked with (@pytest.mark.stubs): {unmarked}"
    unknown = marked - {s.qualname for s in stubs}
    assert not unknown, f"tests are marked with stubs that do not exist: {sorted(unknown)}"


def test_skeletons_in_sync():
    problems = [p for ch in CHAPTERS for p in skeleton.out_of_sync(ch)]
    assert not problems, skeleton.SYNC_ADVICE + "\n" + "\n".join(problems)


def test_no_marker_leaks_into_skeletons():
    from tools.tree import BEGIN_MARK, END_MARK

    for ch in CHAPTERS:
        for path in ch.skeleton_dir.rglob("*.py"):
            for line in path.read_text().splitlines():
                assert not (BEGIN_MARK.match(line) or END_MARK.match(line)), f"marker line in {path}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_main_runs_on_reference_tree(ch):
    script = main_script(ch, sol=True)
    assert script.exists(), f"{ch.slug} has no main.py"
    output = capture(script, assemble(ch.number, "ref"), threads=1)
    assert output.strip(), "the example printed nothing"


@pytest.mark.parametrize("name", ["generate", "stage1"])
def test_examples_run_on_final_tree(name):
    from tools.course import EXAMPLES

    output = capture(EXAMPLES / f"{name}.py", assemble(FINAL, "ref"), threads=1)
    assert "tokens/s" in output
