"""The trace recorder behind `make trace CH=N` (tools/trace_recorder.py), its format and its diff.

Each scenario of tests/course/trace_scenarios.py runs on its chapter's reference tree in a subprocess, once
without and once with the recorder: the recorded run must produce the same tokens and the same batches, and
its trace must follow the schema and show what the chapter is about (chunk boundaries, a radix-cache hit, a
retraction, kept and rejected drafts). The book's reference traces (docs/assets/traces, `make traces`) are
checked against the stored outputs of the same examples (docs/outputs, `make outputs`).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from tools.course import assemble, run_python, tree_env
from tools.trace import BOOK_CHAPTERS, BOOK_LIMIT, BOOK_TRACES, describe_difference, validate
from tools.trace_diff import first_difference, replay, trees
from tools.tree import BUILD, ROOT

SCENARIOS = ROOT / "tests" / "course" / "trace_scenarios.py"
OUTPUTS = ROOT / "docs" / "outputs"


@lru_cache(maxsize=None)
def scenario(name: str, chapter: int) -> dict:
    out = BUILD / "traces" / f"test-{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    code, stdout, stderr = run_python([str(SCENARIOS), name, str(out)], tree_env(assemble(chapter, "ref"), threads=1))
    assert code == 0, f"scenario {name} failed on the chapter {chapter} reference:\n{stdout[-2000:]}\n{stderr[-4000:]}"
    return json.loads(out.read_text())


def engine_of(name: str, chapter: int) -> dict:
    run = scenario(name, chapter)
    assert validate(run["trace"]) == [], f"the {name} trace breaks the schema: {validate(run['trace'])[:3]}"
    assert len(run["trace"]["engines"]) == 1, f"one scheduler was made, the trace has {len(run['trace']['engines'])}"
    return run["trace"]["engines"][0]


def tokens_by_request(engine: dict) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for step in engine["steps"]:
        for uid, tokens in step["tokens"].items():
            out.setdefault(int(uid), []).extend(tokens)
    return out


def events(engine: dict, kind: str) -> list[tuple[int, dict]]:
    return [(s["i"], e) for s in engine["steps"] for e in s["before"] + s["after"] if e["e"] == kind]


@pytest.mark.parametrize("name,chapter", [("chunked", 10), ("radix", 9), ("retract", 23), ("speculative", 26),
                                          ("hicache", 28)])
def test_recording_changes_nothing_and_the_trace_holds_every_token(name, chapter):
    run = scenario(name, chapter)
    assert run["on"]["outputs"] == run["off"]["outputs"], f"{name}: the tokens differ when recorded"
    assert run["on"]["history"] == run["off"]["history"], f"{name}: the batches differ when recorded"
    assert run["restored"], "uninstall() left the recorder's wrappers on Scheduler or PrefillAdder"
    engine = engine_of(name, chapter)
    got = tokens_by_request(engine)
    for uid, want in enumerate(run["on"]["outputs"]):
        assert got.get(uid) == want, f"{name}: request {uid}'s tokens in the trace {got.get(uid)}, generated {want}"
    rows_at = replay(engine)
    for step, rows in zip(engine["steps"], rows_at):
        if step["phase"] == "idle":
            continue
        for row in step["rows"]:
            held = len(rows[row["uid"]][2])
            assert held == row["to"], (f"{name}, step {step['i']}: request {row['uid']} computes up to position "
                                       f"{row['to']} but its page-table row holds {held} pages (page size 1)")


def test_hicache_trace_holds_nodes_kept_on_the_host_only():
    """Chapter 28: a node whose KV went to the host stays in the tree with no device pages, and the turns after it
    start their prefill past their 40-token system prompt, which the device pool no longer held (it was loaded back)."""
    engine = engine_of("hicache", 28)
    pages: dict[str, list] = {}
    emptied_at = None
    for step in engine["steps"]:
        for nid, runs in step.get("tree_pages", {}).items():
            if pages.get(nid) and not runs and emptied_at is None:
                emptied_at = step["i"]
            pages[nid] = runs
    assert emptied_at is not None, "no node of the tree lost its device pages: nothing went to the host only"
    starts = [(s["i"], row["from"]) for s in engine["steps"] if s["phase"] == "prefill" for row in s["rows"]]
    later = [start for i, start in starts if i > emptied_at]
    assert later and min(later) >= 40, (f"after step {emptied_at} (a node went to the host) each turn's prefill should "
                                        f"start past its system prompt; (step, first position): {starts}")


def test_chunked_prefill_trace_has_the_chapters_chunk_boundaries():
    """Chapter 10's rule: every prefill batch but the last computes exactly the budget (16 tokens), every prompt
    token is computed once, and a piece that stops short of its prompt's end is a chunk."""
    engine = engine_of("chunked", 10)
    assert engine["config"]["max_extend_tokens"] == 16
    prefills = [s for s in engine["steps"] if s["phase"] == "prefill"]
    sizes = [sum(r["to"] - r["from"] for r in s["rows"]) for s in prefills]
    assert sizes[:-1] == [16] * (len(sizes) - 1) and 0 < sizes[-1] <= 16, f"prefill batch sizes {sizes}"
    prompts = {int(u): r["prompt"] for u, r in engine["requests"].items()}
    assert sorted(prompts.values()) == [3, 13, 55]
    for uid, length in prompts.items():
        pieces = [(r["from"], r["to"], r["kind"]) for s in prefills for r in s["rows"] if r["uid"] == uid]
        assert [p[0] for p in pieces] == [0] + [p[1] for p in pieces[:-1]] and pieces[-1][1] == length, \
            f"request {uid} ({length} tokens) was prefilled as {pieces}: not every token once, in order"
        assert [p[2] for p in pieces] == ["chunk"] * (len(pieces) - 1) + ["prefill"], \
            f"request {uid}: only its last piece samples a token, got kinds {[p[2] for p in pieces]}"
    resumed = [e["uid"] for _, e in events(engine, "resume")]
    assert resumed.count(0) == 3, f"the 55-token prompt resumes three times after its first chunk, got {resumed}"


def test_radix_trace_shows_the_hit_the_lock_and_the_split():
    engine = engine_of("radix", 9)
    hits = [(i, e) for i, e in events(engine, "admit") if e["hit"]]
    assert [e["uid"] for _, e in hits] == [1, 2, 3] and {e["hit"] for _, e in hits} == {24}, \
        f"the three later requests each find the shared 24 tokens, got {[(e['uid'], e['hit']) for _, e in hits]}"
    step = hits[0][0]
    tree = trees(engine)[step]
    locked = [n for n in tree if n[2] == 24]
    assert locked and locked[0][3] == 3, f"step {step}: the 24-token node is locked by the three requests: {tree}"
    assert any(e["split"] == 1 for _, e in events(engine, "match")), \
        "the first request's node (prompt + answer) must be split where the later prompts leave it"
    for _, e in hits:
        assert e["start"] == 24, f"request {e['uid']} computes from position 24 after its hit, got {e['start']}"


def test_retraction_trace_shows_the_retraction_and_the_recomputation():
    engine = engine_of("retract", 23)
    retracted = events(engine, "retract")
    assert retracted, "a pool of 3 requests at their longest, 6 admitted optimistically: something is retracted"
    for step, ev in retracted:
        uid = ev["uid"]
        again = [i for i, e in events(engine, "admit") if e["uid"] == uid and i > step]
        assert again, f"request {uid}, retracted at step {step}, is never admitted again"
        assert not any(r["uid"] == uid for r in engine["steps"][step]["rows"]), \
            f"request {uid} is retracted while scheduling step {step}: it cannot be one of its rows"
        in_flight = [s["i"] for s in engine["steps"][:step] if any(r["uid"] == uid for r in s["rows"])][-1:]
        assert uid in engine["steps"][in_flight[0]].get("dropped", []), \
            f"request {uid}'s result of step {in_flight[0]}, still in flight (overlap), is thrown away: not marked"


def test_speculative_trace_shows_kept_and_rejected_drafts():
    engine = engine_of("speculative", 26)
    verify = [s for s in engine["steps"] if s["phase"] == "verify"]
    assert verify, "greedy requests with a draft model: verify steps"
    kept_any = rejected_any = False
    for step in verify:
        accepted = {e["uid"]: e["kept"] for e in step["after"] if e["e"] == "accept"}
        finished = {e["uid"] for e in step["after"] if e["e"] == "finish"}
        for row in step["rows"]:
            drafts = row.get("drafts", [])
            assert row["to"] - row["from"] == len(drafts) + 1, f"step {step['i']}: a verify row computes its last " \
                f"token and its drafts: [{row['from']}:{row['to']}] with {len(drafts)} drafts"
            if not drafts:
                continue
            kept = accepted[row["uid"]]
            got = len(step["tokens"].get(str(row["uid"]), []))
            assert got == kept + 1 or (row["uid"] in finished and got <= kept + 1), \
                f"step {step['i']}, request {row['uid']}: {kept} drafts kept, so {kept + 1} tokens; the trace has {got}"
            kept_any |= kept > 0
            rejected_any |= kept < len(drafts)
    assert kept_any and rejected_any, "this run keeps some drafts and rejects others"


# ---------------------------------------------------------------------------------------------- the diff
def book_trace(n: int) -> dict:
    return json.loads((BOOK_TRACES / f"ch{n:02d}.json").read_text())


def test_diff_finds_a_planted_difference_and_ignores_page_ids():
    ref = book_trace(10)
    assert first_difference(ref, copy.deepcopy(ref)) is None
    mine = copy.deepcopy(ref)
    steps = mine["engines"][0]["steps"]
    late = next(s for s in steps if s["phase"] == "prefill" and len(s["rows"]) == 2 and s["rows"][0]["from"] > 0)
    late["rows"][1]["to"] -= 1  # a chunk one token short
    diff = first_difference(mine, ref)
    assert diff is not None and (diff["engine"], diff["step"]) == (0, late["i"]) and "batch" in diff["fields"], diff
    text = describe_difference(diff, mine, ref)
    assert f"step {late['i']}" in text and "batch" in text, text
    renumbered = copy.deepcopy(ref)  # the same decisions on other pages: no difference
    for step in renumbered["engines"][0]["steps"]:
        for change in step["pages"]:
            if change[1] is not None:
                change[4] = [[first + 1000, count] for first, count in change[4]]
    assert first_difference(renumbered, ref) is None, "page ids are not part of what the diff compares"
    tokens = copy.deepcopy(ref)
    step = next(s for s in tokens["engines"][0]["steps"] if s["tokens"])
    uid = next(iter(step["tokens"]))
    step["tokens"][uid] = [step["tokens"][uid][0] + 1]
    diff = first_difference(tokens, ref)
    assert diff["step"] == step["i"] and list(diff["fields"]) == ["tokens"], diff


def test_diff_command_prints_the_first_difference(tmp_path):
    ref = book_trace(10)
    mine = copy.deepcopy(ref)
    mine["engines"][0]["steps"] = mine["engines"][0]["steps"][:3]
    mine["exit"] = {"code": 1, "error": "NotImplementedError: TODO(ch10): PrefillAdder.try_add_one"}
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    proc = subprocess.run([sys.executable, "-m", "tools.trace", "diff", str(tmp_path / "mine.json"),
                           str(BOOK_TRACES / "ch10.json")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1 and "first difference: engine 0" in proc.stdout and "step 3" in proc.stdout, \
        proc.stdout + proc.stderr
    (tmp_path / "bad.json").write_text(json.dumps({"schema": "minisgl-trace", "version": 2}))
    proc = subprocess.run([sys.executable, "-m", "tools.trace", "validate", str(tmp_path / "bad.json")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "version" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------- the book's traces
@pytest.mark.parametrize("n", BOOK_CHAPTERS)
def test_book_trace_follows_the_schema_and_stays_small(n):
    path = BOOK_TRACES / f"ch{n:02d}.json"
    assert path.stat().st_size < BOOK_LIMIT, f"{path.name}: {path.stat().st_size} bytes, the book's limit {BOOK_LIMIT}"
    doc = json.loads(path.read_text())
    assert validate(doc) == [], validate(doc)[:3]
    assert doc["chapter"] == n and doc["tree"] == "ref" and doc["exit"] == {"code": 0, "error": None}


def output(slug: str) -> str:
    return (OUTPUTS / f"{slug}.txt").read_text()


def test_book_traces_agree_with_the_examples_outputs():
    """The traces and docs/outputs come from the same examples on the same reference: their counts agree."""
    ch10 = book_trace(10)["engines"][0]
    printed = re.findall(r"^batch +\d+  prefill +(\d+) tokens: (.*)$", output("ch10_chunked_prefill"), re.M)
    traced = [(str(sum(r["to"] - r["from"] for r in s["rows"])),
               ", ".join(f"{r['uid']}[{r['from']}:{r['to']}] {'chunked' if r['kind'] == 'chunk' else 'complete'}"
                         for r in s["rows"])) for s in ch10["steps"] if s["phase"] == "prefill"]
    assert traced == printed, f"chapter 10's prefill batches: trace {traced}, example printed {printed}"

    naive, radix = book_trace(9)["engines"]
    later = re.search(r"the three later prompts: (\d+) new KV slots without the cache, (\d+) with it",
                      output("ch09_radix_cache"))
    for engine, want in ((naive, int(later[1])), (radix, int(later[2]))):
        got = sum(r["to"] - r["from"] for s in engine["steps"] if s["phase"] == "prefill" and s["run"] == 1
                  for r in s["rows"])
        assert got == want, f"chapter 9, cache_type={engine['config']['cache_type']}: {got} computed, printed {want}"
    assert any(e["hit"] > 0 for _, e in events(radix, "admit")), "chapter 9's radix run has a cache hit"

    conservative, optimistic = book_trace(23)["engines"]
    for engine in (conservative, optimistic):
        line = re.search(rf"admission={engine['config']['admission']}: (\d+) batches, .*?, (\d+) retractions?",
                         output("ch23_retraction"))
        batches = sum(s["phase"] != "idle" for s in engine["steps"])
        assert (batches, len(events(engine, "retract"))) == (int(line[1]), int(line[2])), \
            f"chapter 23, {engine['config']['admission']}: trace {batches} batches, printed {line[0]}"
    assert events(optimistic, "retract"), "chapter 23's optimistic run retracts"

    spec = {e["config"]["speculative"]: e for e in book_trace(26)["engines"]}
    for name, label in (("ngram, k=4", "n-gram, k=4"), ("draft, k=2", "draft model, k=2")):
        engine = spec[name]
        line = re.search(rf"== {re.escape(label)} .*\n +(\d+) verify steps: (\d+) draft tokens proposed, (\d+) accepted",
                         output("ch26_speculative"))
        verify = [s for s in engine["steps"] if s["phase"] == "verify"]
        proposed = sum(len(r.get("drafts", [])) for s in verify for r in s["rows"])
        accepted = sum(e["kept"] for _, e in events(engine, "accept"))
        assert (len(verify), proposed, accepted) == tuple(map(int, line.groups())), \
            f"chapter 26, {label}: trace {len(verify)} verify steps, {proposed} proposed, {accepted} kept; printed {line[0]}"
