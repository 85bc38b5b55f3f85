"""The server's chat page (`/`, chapter 15), end to end in headless Chromium with every request to a host other than
127.0.0.1 blocked: a question typed and sent streams an answer that equals the non-streamed
/v1/chat/completions answer with the same settings (temperature 0, same max_tokens), followed by its usage and
finish reason; Stop during a long answer ends it, and the server lets the request go and keeps serving. Send is
disabled while a reply streams and the newest text stays in view; a failed turn is not sent again; New chat starts
the conversation over.

The server is `python -m minisgl.server` on SmolLM2, run from the final reference tree. Marker `browser`; needs
the Debian `chromium` package and the `playwright` Python package (never downloads a browser); skipped with the
reason otherwise. Screenshot: build/chat-page.png.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.course.offline_browser import offline_page
from tools.course import assemble, tree_env
from tools.tree import last_chapter

ROOT = Path(__file__).resolve().parents[2]
SERVER_FLAGS = ("--max-running-reqs", "4", "--max-seq-len", "512", "--cpu-kv-cache-mb", "64",
                "--max-extend-tokens", "128")
QUESTION = "Why do we need sleep?"  # SmolLM2 answers at length: max_tokens ends it
SHORT, LONG = 24, 400  # max tokens of the compared answer, and of the one that is stopped

# Every version of the answer's text as the page shows it, recorded as it changes (proof that it streams).
WATCH_ANSWERS = """() => {
  window.answerSnapshots = [];
  new MutationObserver(() => {
    const answers = document.querySelectorAll('#log .assistant');
    if (answers.length) window.answerSnapshots.push(answers[answers.length - 1].textContent);
  }).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});
}"""


def _local_server_class(tree: Path):
    """Chapter 15's LocalServer, loaded from the tree's file: this process does not import the engine."""
    spec = importlib.util.spec_from_file_location("chat_page_local_server", tree / "minisgl/server/local.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LocalServer


@pytest.fixture(scope="module")
def chat_server():
    """The server on SmolLM2 from the final tree, stopped with Ctrl-C's signal, nothing left behind."""
    pytest.importorskip("httpx")
    from tools.models import ensure_model

    tree = assemble(last_chapter(), "ref")
    LocalServer = _local_server_class(tree)
    server = LocalServer(ensure_model("smollm2"), *SERVER_FLAGS, env=tree_env(tree, threads=1), start_timeout=300)
    try:
        yield server.url
    finally:
        server.stop()
        assert server.left_behind == [], f"the server left processes behind (killed): {server.left_behind}"


def _settled(url: str, timeout: float = 30.0) -> dict:
    """/health (always 200) once the server holds no request."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(f"{url}/health", timeout=30)
        assert r.status_code == 200, f"/health answered {r.status_code}: {r.text}"
        status = r.json()
        if status["running"] == 0 and status["waiting"] == 0:
            return status
        assert time.monotonic() < deadline, f"requests still held {timeout:.0f} s after the page stopped: {status}"
        time.sleep(0.2)


def _answer(page, index: int, pattern: str, timeout_ms: int = 120_000) -> tuple[str, str]:
    """(text, meta line) of the index-th answer once its meta line matches the regular expression."""
    page.wait_for_function(
        "([i, p]) => { const m = document.querySelectorAll('#log .meta')[i];"
        " return m && new RegExp(p).test(m.textContent); }", arg=[index, pattern], timeout=timeout_ms)
    return (page.eval_on_selector_all("#log .assistant", "(e, i) => e[i].textContent", index),
            page.eval_on_selector_all("#log .meta", "(e, i) => e[i].textContent", index))


def _send(page, question: str, max_tokens: int) -> None:
    page.fill("#max-tokens", str(max_tokens))
    page.fill("#prompt", question)
    page.click("#send")


@pytest.mark.browser
def test_chat_page_streams_the_greedy_answer_and_stops(chat_server: str):
    import httpx

    # The reference: the same question, not streamed, with the page's settings.
    body = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": SHORT, "temperature": 0}
    reply = httpx.post(f"{chat_server}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    want = reply.json()
    want_text = want["choices"][0]["message"]["content"]
    want_meta = f"{want['usage']['completion_tokens']} tokens, finish: {want['choices'][0]['finish_reason']}"
    assert want["choices"][0]["finish_reason"] == "length", \
        f"the answer must be cut by max_tokens (so the page's setting counts); pick a question with a longer one: {want}"

    requested: list[str] = []
    with offline_page({"width": 1000, "height": 800}) as page:
        page.on("request", lambda r: requested.append(r.url))
        page.goto(f"{chat_server}/", wait_until="load")
        assert page.text_content("#model") == "smollm2", "the page names the served model"
        page.evaluate(WATCH_ANSWERS)

        _send(page, QUESTION, SHORT)
        text, meta = _answer(page, 0, "finish:")
        assert text == want_text, f"the page's streamed answer differs from the API's:\n{text!r}\n{want_text!r}"
        assert meta == want_meta, f"usage/finish line {meta!r}, expected {want_meta!r}"
        shown = [s for s in dict.fromkeys(page.evaluate("window.answerSnapshots")) if s]
        assert len(shown) >= 2 and shown[-1] == text, f"the answer did not stream in pieces: {shown}"
        assert page.is_disabled("#stop"), "Stop is disabled once the answer is complete"

        # A long answer (the second turn of the conversation), stopped once it has begun.
        _send(page, "Tell me a long story about the sea.", LONG)
        page.wait_for_function("() => { const a = document.querySelectorAll('#log .assistant');"
                               " return a.length === 2 && a[1].textContent.length > 0; }", timeout=120_000)
        assert not page.is_disabled("#stop"), "Stop is enabled while an answer streams"
        page.click("#stop")
        stopped, meta = _answer(page, 1, "^stopped$", timeout_ms=30_000)
        assert stopped, "the text streamed before Stop stays on the page"
        assert page.is_disabled("#stop")
        status = _settled(chat_server)
        assert status["available_slots"] == status["total_slots"], f"the stopped request kept KV slots: {status}"
        (ROOT / "build").mkdir(exist_ok=True)
        page.screenshot(path=str(ROOT / "build" / "chat-page.png"), full_page=True)

    again = httpx.post(f"{chat_server}/v1/chat/completions", json=body, timeout=120)
    assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"] == want_text, \
        f"after Stop the server still answers the same: {again.text}"
    hosts = {urlsplit(u).hostname for u in requested if not u.startswith(("data:", "blob:"))}
    assert requested and hosts == {"127.0.0.1"}, f"the page loaded from other hosts: {sorted(set(requested))}"


def _chat_bodies(page) -> list[dict]:
    """The JSON body of every /v1/chat/completions request the page makes, as they are sent."""
    import json

    bodies: list[dict] = []
    page.on("request", lambda r: r.url.endswith("/v1/chat/completions") and bodies.append(json.loads(r.post_data)))
    return bodies


@pytest.mark.browser
def test_chat_page_sends_one_turn_at_a_time_and_keeps_the_newest_text_in_view(chat_server: str):
    """While a reply streams, Send is disabled and Enter sends nothing; the log keeps its newest text in view
    (the answer grows past the window's height here)."""
    with offline_page({"width": 420, "height": 360}) as page:
        bodies = _chat_bodies(page)
        page.goto(f"{chat_server}/", wait_until="load")
        _send(page, "Tell me a long story about the sea.", LONG)
        page.wait_for_function("() => { const a = document.querySelector('#log .assistant');"
                               " return a && a.textContent.length > 0; }", timeout=120_000)
        assert page.is_disabled("#send"), "Send is disabled while a reply streams"
        page.fill("#prompt", "a second question")
        page.press("#prompt", "Enter")
        page.wait_for_timeout(500)
        assert len(bodies) == 1, f"a second turn was sent while the first streamed: {len(bodies)} requests"
        # The answer is taller than the window: its newest line must be in view, in the log's visible box.
        page.wait_for_function("() => document.querySelector('#log .assistant').offsetHeight > window.innerHeight",
                               timeout=180_000)
        view = page.evaluate("""() => { const a = document.querySelector('#log .assistant');
            const log = document.getElementById('log').getBoundingClientRect();
            return {bottom: a.getBoundingClientRect().bottom, limit: Math.min(window.innerHeight, log.bottom)}; }""")
        assert view["bottom"] <= view["limit"] + 2, f"the newest text is out of view: {view}"
        page.click("#stop")
        _answer(page, 0, "^stopped$", timeout_ms=30_000)
        assert not page.is_disabled("#send") and page.is_disabled("#stop"), "after Stop, Send is back"
    _settled(chat_server)


ERROR_EVENT = ('data: {"error": {"message": "the server is shutting down", "type": "service_unavailable", '
               '"param": null, "code": null}}\n\ndata: [DONE]\n\n')


@pytest.mark.browser
def test_chat_page_drops_a_failed_turn_and_starts_a_new_chat(chat_server: str):
    """A turn whose stream ends with an error event (as when a worker dies) is shown with the error but not sent
    again with the next turn; "New chat" empties the log and the conversation."""
    with offline_page({"width": 1000, "height": 800}) as page:
        bodies = _chat_bodies(page)
        page.goto(f"{chat_server}/", wait_until="load")
        page.route("**/v1/chat/completions", lambda r: r.fulfill(status=200, body=ERROR_EVENT,
                                                                 headers={"content-type": "text/event-stream"}))
        _send(page, "Hi", 4)
        _, meta = _answer(page, 0, "^error", timeout_ms=30_000)
        assert "shutting down" in meta, meta
        page.unroute("**/v1/chat/completions")
        _send(page, "Hello", 4)
        answer, _ = _answer(page, 1, "finish:")
        assert bodies[-1]["messages"] == [{"role": "user", "content": "Hello"}], \
            f"the failed turn must not be sent again: {bodies[-1]['messages']}"
        _send(page, "Thanks", 4)
        _answer(page, 2, "finish:")
        assert bodies[-1]["messages"] == [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": answer},
                                          {"role": "user", "content": "Thanks"}], bodies[-1]["messages"]
        page.click("#new")
        assert page.eval_on_selector("#log", "e => e.children.length") == 0, "New chat empties the log"
        _send(page, "Hi again", 4)
        _answer(page, 0, "finish:")
        assert bodies[-1]["messages"] == [{"role": "user", "content": "Hi again"}], \
            f"after New chat the conversation starts over: {bodies[-1]['messages']}"
    _settled(chat_server)
