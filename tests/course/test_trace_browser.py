"""The book's trace player (docs/assets/javascripts/trace-player.js) in headless Chromium, offline.

On the player page: a reference trace opened through the file input and through drag and drop; step, scrub,
arrow keys and play; the KV pool grid and the radix tree drawn from the trace (their cells and nodes counted
against the trace itself, replayed in Python); a trace with a planted difference compared with the reference:
the player finds the step tools/trace_diff.py finds, jumps there and marks the field. At 390 px the page does not
scroll sideways. The stage pages' embedded players open their traces at the engine and step they name, in both
languages, and those steps hold what the pages say (a retraction, a verify step with kept and rejected drafts).

Marker `browser`; shares the built site with the other browser tests (conftest.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.course.offline_browser import offline_page
from tools.trace import BOOK_TRACES
from tools.trace_diff import first_difference, replay, trees

pytestmark = [pytest.mark.xdist_group("site"), pytest.mark.browser]

PLAYER = ".trace-player"

# The stage pages' embedded players: (trace, engine, step) in page order, and what the page says happens there.
STAGE_PLAYERS = {
    "stage2": [("ch10", 0, 0), ("ch09", 1, 17)],
    "stage5": [("ch23", 1, 43), ("ch26", 2, 1)],
}


def book(n: int) -> dict:
    return json.loads((BOOK_TRACES / f"ch{n:02d}.json").read_text())


def state(page) -> dict:
    return page.evaluate("""() => { const r = document.querySelector('.trace-player');
        return {step: Number(r.dataset.step), loaded: r.dataset.loaded, playing: r.dataset.playing === '1',
                message: r.querySelector('.tp-message').textContent, counter: r.querySelector('.tp-counter').textContent,
                held: r.querySelectorAll('rect.tp-page-held').length,
                cached: r.querySelectorAll('rect.tp-page-cached').length,
                locked: r.querySelectorAll('rect.tp-page-locked').length,
                conflict: r.querySelectorAll('rect.tp-page-conflict').length,
                nodes: [...r.querySelectorAll('svg.tp-tree g.tp-node')].map(g => Number(g.dataset.node || 0)).sort((a, b) => a - b),
                rows: [...r.querySelectorAll('table.tp-rows tr[data-uid]')].map(tr => Number(tr.dataset.uid))}; }""")


def expected(engine: dict, i: int) -> dict:
    """What the grid and the tree must show at step i, from the trace replayed in Python."""
    rows, tree = replay(engine)[i], trees(engine)[i]
    ps = engine["config"]["page_size"]
    held = sum(len(pages[-(-shared // ps):]) for _, shared, pages in rows.values())
    pages: dict[int, list] = {}
    for step in engine["steps"][: i + 1]:
        for nid, spans in step.get("tree_pages", {}).items():
            pages[int(nid)] = spans
    size = {n[0]: sum(c for _, c in pages.get(n[0], [])) for n in tree}
    return {"held": held, "locked": sum(size[n[0]] for n in tree if n[3] > 0),
            "cached": sum(size[n[0]] for n in tree if n[3] == 0), "nodes": [0] + sorted(n[0] for n in tree),
            "rows": [r["uid"] for r in engine["steps"][i]["rows"]]}


def go(page, step: int) -> None:
    page.evaluate("s => { const r = document.querySelector('.tp-slider'); r.value = s; "
                  "r.dispatchEvent(new Event('input')); }", step)


def test_trace_player_plays_scrubs_draws_and_diffs(built_site: Path, site_server: str, tmp_path):
    assert (built_site / "assets" / "traces" / "ch10.json").is_file(), "the book's traces are not in the site"
    ref10, ref09 = book(10), book(9)
    with offline_page({"width": 1200, "height": 900}, no_search_docs=built_site) as page:
        page.goto(f"{site_server}/trace_player/", wait_until="load")
        page.set_input_files(f"{PLAYER} .tp-file-a input", str(BOOK_TRACES / "ch10.json"))
        page.wait_for_function("document.querySelector('.trace-player').dataset.loaded === '1'", timeout=10_000)
        steps = len(ref10["engines"][0]["steps"])
        s = state(page)
        assert s["step"] == 0 and s["counter"].startswith(f"step 0 / {steps - 1}"), s
        assert page.eval_on_selector_all(".tp-timeline rect.tp-bar", "bars => bars.length") == steps

        page.click(".tp-next")
        page.click(".tp-next")
        assert state(page)["step"] == 2
        page.click(".tp-prev")
        assert state(page)["step"] == 1
        page.focus(PLAYER)
        page.keyboard.press("ArrowRight")
        assert state(page)["step"] == 2
        engine = ref10["engines"][0]
        for i in range(steps):  # scrub to every step: the grid, the tree and the batch follow the trace
            go(page, i)
            s, want = state(page), expected(engine, i)
            assert s["step"] == i
            for key in ("held", "locked", "cached", "nodes", "rows"):
                assert s[key] == want[key], f"ch10 step {i}: the player shows {key} {s[key]}, the trace {want[key]}"
            assert s["conflict"] == 0, f"ch10 step {i}: pages drawn as claimed twice"
        page.click(".tp-first")
        page.select_option(".tp-speed", "16")
        page.click(".tp-play")
        page.wait_for_function("Number(document.querySelector('.trace-player').dataset.step) >= 3", timeout=5_000)
        assert state(page)["playing"]
        page.click(".tp-play")  # pause
        paused = state(page)
        page.wait_for_timeout(400)
        assert not state(page)["playing"] and state(page)["step"] == paused["step"], "pause did not stop the player"

        # the radix tree, moving: chapter 9's radix engine at the step of its cache hit
        page.set_input_files(f"{PLAYER} .tp-file-a input", str(BOOK_TRACES / "ch09.json"))
        page.wait_for_function("document.querySelector('.tp-engine').options.length === 2")
        page.select_option(".tp-engine", "1")
        radix = ref09["engines"][1]
        hit = next(s["i"] for s in radix["steps"] for e in s["before"] if e["e"] == "admit" and e["hit"] > 0)
        go(page, hit)
        s, want = state(page), expected(radix, hit)
        assert s["nodes"] == want["nodes"] and s["locked"] == want["locked"] > 0, (s, want)
        assert page.eval_on_selector_all("svg.tp-tree g.tp-hit", "g => g.length") >= 1, "the matched node is not marked"
        assert page.eval_on_selector_all("svg.tp-tree line.tp-edge", "l => l.length") == len(want["nodes"]) - 1

        # a planted difference: one chunk a token short in step k
        mine = copy.deepcopy(ref10)
        k = next(s["i"] for s in mine["engines"][0]["steps"] if s["phase"] == "prefill" and len(s["rows"]) == 2)
        mine["engines"][0]["steps"][k]["rows"][1]["to"] -= 1
        planted = tmp_path / "mine.json"
        planted.write_text(json.dumps(mine))
        assert first_difference(mine, ref10)["step"] == k
        page.set_input_files(f"{PLAYER} .tp-file-a input", str(planted))
        page.wait_for_function("document.querySelector('.trace-player').dataset.loaded === '1'")
        page.set_input_files(f"{PLAYER} .tp-file-b input", str(BOOK_TRACES / "ch10.json"))
        page.wait_for_function("document.querySelector('.trace-player').dataset.loaded === '2'")
        text = page.inner_text(".tp-diff-first")
        assert f"step {k}" in text and "batch" in text, text
        go(page, 0)
        page.click(".tp-jump")
        assert state(page)["step"] == k
        assert page.eval_on_selector_all("tr.tp-differs", "rows => rows.map(r => r.dataset.field)") == ["batch"]
        assert page.eval_on_selector_all(".tp-mark-diff", "m => m.length") == 1

        # the JavaScript diff agrees with tools/trace_diff.py on every book trace with a token changed
        for n in (9, 10, 23, 26):
            ref = book(n)
            for e, engine in enumerate(ref["engines"]):
                changed = copy.deepcopy(ref)
                step = [s for s in changed["engines"][e]["steps"] if s["tokens"]][-1]
                uid = sorted(step["tokens"])[0]
                step["tokens"][uid] = [t + 1 for t in step["tokens"][uid]]
                want = first_difference(changed, ref)
                got = page.evaluate("([a, b]) => tracePlayer.compare(a, b).first", [changed, ref])
                assert (got["engine"], got["step"], got["fields"]) == (want["engine"], want["step"],
                                                                        list(want["fields"])), (n, e, got, want)
                assert page.evaluate("([a, b]) => tracePlayer.compare(a, b).first", [ref, ref]) is None

        # drag and drop, and a file that is not a trace
        page.evaluate("""text => { const dt = new DataTransfer();
            dt.items.add(new File([text], 'dropped.json', {type: 'application/json'}));
            document.querySelector('.trace-player').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true})); }""",
                      (BOOK_TRACES / "ch23.json").read_text())
        page.wait_for_function("document.querySelector('.tp-title').textContent.startsWith('dropped.json')")
        page.select_option(".tp-engine", "1")  # optimistic admission
        retractions = [s["i"] for s in book(23)["engines"][1]["steps"] for e in s["before"] + s["after"]
                       if e["e"] == "retract"]
        assert page.eval_on_selector_all(".tp-timeline .tp-mark-retract", "m => m.map(r => Number(r.getAttribute('x')))") \
            == retractions, "chapter 23's retractions are not marked on the timeline where they happen"
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"schema": "minisgl-trace", "version": 9, "engines": []}))
        page.set_input_files(f"{PLAYER} .tp-file-a input", str(bad))
        page.wait_for_function("document.querySelector('.tp-message').textContent.includes('version 9')")
        assert state(page)["counter"], "a bad file must not throw the loaded trace away"


def test_trace_player_fits_a_phone_and_the_stage_pages_embed_traces(built_site: Path, site_server: str):
    with offline_page({"width": 390, "height": 844}, no_search_docs=built_site) as page:
        page.goto(f"{site_server}/trace_player/?trace=ch09&engine=1&step=17", wait_until="load")
        page.wait_for_function("document.querySelector('.trace-player').dataset.loaded === '1'", timeout=10_000)
        assert state(page)["step"] == 17
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= 390, f"the player page scrolls sideways on a 390 px phone ({wide} px)"
        for panel in page.query_selector_all(".tp-panel"):
            box = panel.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390, f"a panel leaves the screen: {box}"

        for lang in ("", "zh/"):  # the Chinese pages live under /zh/, the traces at the site's root
            for stage, players in STAGE_PLAYERS.items():
                where = f"{lang or 'en/'}stages/{stage}"
                page.goto(f"{site_server}/{lang}stages/{stage}/", wait_until="load")
                page.wait_for_function("[...document.querySelectorAll('.trace-player')].every(r => r.dataset.loaded === '1')",
                                       timeout=10_000)
                embedded = page.eval_on_selector_all(".trace-player", """rs => rs.map(r => [r.dataset.trace,
                    Number(r.querySelector('.tp-engine').value), Number(r.dataset.step)])""")
                assert embedded == [list(p) for p in players], f"{where}: players open at {embedded}, the page names {players}"
                assert page.evaluate("document.documentElement.scrollWidth") <= 390, f"{where} scrolls sideways"
                if stage == "stage5":  # the retraction and the verify step the page describes are on screen
                    shown = page.eval_on_selector_all(".trace-player", """rs => rs.map(r =>
                        [...r.querySelectorAll('.tp-events li')].map(li => [li.className, li.textContent]))""")
                    assert any(k == "tp-ev-retract" for k, _ in shown[0]), f"{where}: ch23's player shows no retraction: {shown[0]}"
                    kept = {"": "request 1 kept 1 drafts", "zh/": "请求 1 保留了 1 个 draft"}[lang]
                    assert ["tp-ev-accept", kept] in shown[1], f"{where}: ch26's player does not show {kept!r}: {shown[1]}"


def test_the_stage_pages_name_steps_that_show_what_they_describe():
    """Stage 5's page says: at step 43 of ch23's engine 1 a request is retracted (and admitted again at step 52 with
    39 tokens found in the tree, 24 recomputed); at step 1 of ch26's engine 2 (the draft model) a verify step keeps one of
    request 1's two drafts and none of request 0's, and the rejected drafts' pages go back. A re-recorded trace that moves these steps fails here, not silently."""
    steps = book(23)["engines"][1]["steps"]
    retract = [e for e in steps[43]["before"] + steps[43]["after"] if e["e"] == "retract"]
    assert [(e["uid"], e["known"]) for e in retract] == [(7, 63)], f"ch23 engine 1 step 43: retractions {retract}"
    readmit = [e for e in steps[52]["before"] if e["e"] == "admit"]
    assert [(e["uid"], e["hit"], e["end"] - e["start"]) for e in readmit] == [(7, 39, 24)], \
        f"ch23 engine 1 step 52: admissions {readmit}"
    step = book(26)["engines"][2]["steps"][1]
    assert step["phase"] == "verify", f"ch26 engine 2 step 1 is a {step['phase']} step"
    drafts = {r["uid"]: len(r.get("drafts", [])) for r in step["rows"]}
    kept = {e["uid"]: e["kept"] for e in step["after"] if e["e"] == "accept"}
    assert (drafts, kept) == ({0: 2, 1: 2}, {0: 0, 1: 1}), f"ch26 engine 2 step 1: drafts {drafts}, kept {kept}"
    assert any(e["e"] == "free" and e["by"] == "free_rejected" for e in step["after"]), \
        "ch26 engine 2 step 1: the rejected drafts' pages are not given back"
