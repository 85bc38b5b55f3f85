"""Chapter 15: the OpenAI-compatible server. The request mapping, the event stream and the app's routes (API key,
errors, a client that leaves a waiting request) are tested in-process; the rest against a real server process
(`python -m minisgl.server`) with the official openai client and httpx: HF-greedy equality, stop strings, seeds,
bad requests, 64 concurrent streams with disconnects, /metrics and the request log, a worker's crash, and Ctrl-C or
a group SIGTERM ending open streams and leaving no process behind."""

from __future__ import annotations

import asyncio
import json
import random
import selectors
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from urllib.parse import urlsplit

import httpx
import pytest

from helpers import CHAT, TEXTS, health_until, hf_greedy, hold, model_path, step_until, tokenizer
from minisgl.message import UserReply
from minisgl.server.errors import APIError
from minisgl.server.local import LocalServer
from minisgl.server.protocol import NOT_SUPPORTED, ChatCompletionRequest, CompletionRequest, to_tokenize_msg
from minisgl.server.serving_chat import OpenAIServingChat
from minisgl.server.serving_completions import OpenAIServingCompletion

SERVER_STUBS = ("to_tokenize_msg", "OpenAIServing.handle", "OpenAIServing.events")


@pytest.fixture(scope="module", autouse=True)
def start_servers_early(request):
    """When any selected test needs a server, start them with the module's first test: the in-process tests run
    while they load."""
    if any("servers" in item.fixturenames for item in request.session.items):
        request.getfixturevalue("servers")


# ---- in-process: OpenAI request -> TokenizeMsg ----------------------------------------------------------------

@pytest.mark.stubs("to_tokenize_msg")
def test_openai_fields_become_a_tokenize_msg():
    msg = to_tokenize_msg(3, CompletionRequest(prompt=[1, 2, 3], max_tokens=7, temperature=0.5, top_p=0.9,
                                               top_k=20, seed=11, stop="\n\n", stop_token_ids=[2],
                                               ignore_eos=True))
    p = msg.sampling_params
    assert (msg.uid, msg.text, msg.stop, msg.stop_token_ids, msg.auto_max_tokens) == (3, [1, 2, 3], ["\n\n"], [2],
                                                                                      False), f"{msg}"
    assert (p.max_tokens, p.temperature, p.top_p, p.top_k, p.seed, p.ignore_eos) == (7, 0.5, 0.9, 20, 11, True), p
    assert to_tokenize_msg(0, CompletionRequest(prompt="hi")).sampling_params.max_tokens == 16, \
        "completions default to max_tokens 16, as OpenAI's"
    assert to_tokenize_msg(0, CompletionRequest(prompt=["hi"])).text == "hi", "a list of one prompt is that prompt"
    chat = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    auto = to_tokenize_msg(1, ChatCompletionRequest(messages=chat))
    assert auto.auto_max_tokens and auto.text == [{"role": "user", "content": "ab"}], \
        f"chat without max_tokens uses the room left; text parts are joined: {auto}"
    both = to_tokenize_msg(1, ChatCompletionRequest(messages=chat, max_completion_tokens=9, stop=["x", "y"]))
    assert both.sampling_params.max_tokens == 9 and not both.auto_max_tokens and both.stop == ["x", "y"], f"{both}"


# The sampling API's fields: refused here, served from chapter 24 on (its suite checks them there).
SAMPLING_API = [({"n": 2}, "n"), ({"logprobs": 1}, "logprobs"), ({"presence_penalty": 0.5}, "presence_penalty"),
                ({"frequency_penalty": 1.0}, "frequency_penalty"), ({"logit_bias": {"5": 1.0}}, "logit_bias")]


@pytest.mark.stubs("to_tokenize_msg")
@pytest.mark.parametrize("fields, param", SAMPLING_API + [
    ({"echo": True}, "echo"), ({"best_of": 3}, "best_of"), ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": -1.0}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"stop": ["ok", ""]}, "stop"),
    ({"prompt": ["a", "b"]}, "prompt"), ({"prompt": ""}, "prompt"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
], ids=lambda v: json.dumps(v) if isinstance(v, dict) else v)
def test_unsupported_or_bad_fields_are_a_400_naming_them(fields, param):
    if (fields, param) in SAMPLING_API and param not in NOT_SUPPORTED:
        pytest.skip(f"{param} is served by this tree (chapter 24's sampling API)")
    with pytest.raises(APIError) as refused:
        to_tokenize_msg(0, CompletionRequest(**({"prompt": "hi"} | fields)))
    assert (refused.value.status, refused.value.param) == (400, param), \
        f"{fields}: got {refused.value.status} naming {refused.value.param!r} ({refused.value.message})"


@pytest.mark.stubs("to_tokenize_msg")
def test_chat_only_fields_are_checked_too():
    chat = [{"role": "user", "content": "hi"}]
    for fields, param in [({"tools": [{"type": "function"}]}, "tools"), ({"top_logprobs": 2}, "top_logprobs"),
                          ({"tool_choice": "auto"}, "tool_choice"),
                          ({"response_format": {"type": "json_object"}}, "response_format"),
                          ({"max_tokens": 5, "max_completion_tokens": 6}, "max_completion_tokens"),
                          ({"messages": []}, "messages")]:
        if param == "response_format" and param not in NOT_SUPPORTED:
            continue  # structured output is served from chapter 25 on (its suite checks it there)
        with pytest.raises(APIError) as refused:
            to_tokenize_msg(0, ChatCompletionRequest(**({"messages": chat} | fields)))
        assert refused.value.param == param, f"{fields}: the 400 names {refused.value.param!r}, not {param!r}"
    ok = to_tokenize_msg(0, ChatCompletionRequest(messages=chat, n=1, response_format={"type": "text"},
                                                  presence_penalty=0.0))
    assert ok.sampling_params.max_tokens >= 1, "do-nothing values of unsupported fields are accepted"


@pytest.mark.stubs("to_tokenize_msg")
def test_fields_that_change_nothing_are_accepted_and_the_rest_still_refused():
    from pydantic import ValidationError

    messages = [{"role": "developer", "content": "Be brief.", "name": "ops"}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": None}, {"role": "user", "content": "Why?", "name": "ann"}]
    msg = to_tokenize_msg(0, ChatCompletionRequest(messages=messages, user="u-1", store=False, metadata={"a": "b"},
                                                   parallel_tool_calls=True))
    assert msg.text == [{"role": "system", "content": "Be brief.", "name": "ops"}, {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": ""}, {"role": "user", "content": "Why?", "name": "ann"}], \
        f"developer is system, a null assistant content is empty, names go to the template: {msg.text}"
    with pytest.raises(APIError) as refused:
        to_tokenize_msg(0, ChatCompletionRequest(messages=[{"role": "user", "content": None}]))
    assert (refused.value.status, refused.value.param) == (400, "messages[0]"), "a user message needs a content"
    with pytest.raises(ValidationError):  # an unknown field: FastAPI answers it with a 400 naming the field
        ChatCompletionRequest(messages=messages, reasoning_level="high")
    with pytest.raises(APIError) as refused:
        to_tokenize_msg(0, ChatCompletionRequest(messages=messages, tool_choice="required"))
    assert refused.value.param == "tool_choice", "a parameter that would change the answer is still a 400"


# Every field of the request objects of OpenAI's API, with a value a client may send that asks for something: the
# API reference (https://platform.openai.com/docs/api-reference/completions/create and .../chat/create) as the
# `openai` package's CompletionCreateParams spell it. Each one is accepted with a meaning or refused with a 400
# that names it; nothing that would change the answer is dropped in silence.
COMPLETION_FIELDS = {
    "model": "smollm2", "prompt": "Hi", "best_of": 2, "echo": True, "frequency_penalty": 0.5,
    "logit_bias": {"5": 10.0}, "logprobs": 2, "max_tokens": 7, "n": 2, "presence_penalty": 0.5, "seed": 3,
    "stop": ["x"], "stream": True, "stream_options": {"include_usage": True}, "suffix": "end", "temperature": 0.5,
    "top_p": 0.5, "user": "u-1",
}
CHAT_FIELDS = {
    "messages": [{"role": "user", "content": "Hi"}], "model": "smollm2",
    "audio": {"voice": "alloy", "format": "wav"}, "frequency_penalty": 0.5, "function_call": "auto",
    "functions": [{"name": "f"}], "logit_bias": {"5": 10.0}, "logprobs": True, "max_completion_tokens": 7,
    "max_tokens": 7, "metadata": {"team": "a"}, "modalities": ["text", "audio"],
    "moderation": {"model": "omni-moderation-latest"}, "n": 2, "parallel_tool_calls": False,
    "prediction": {"type": "content", "content": "Hello"}, "presence_penalty": 0.5, "prompt_cache_key": "k-1",
    "prompt_cache_options": {"ttl": "30m"}, "prompt_cache_retention": "24h", "reasoning_effort": "low",
    "response_format": {"type": "json_object"}, "safety_identifier": "s-1", "seed": 3, "service_tier": "flex",
    "stop": "x", "store": True, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.5,
    "tool_choice": "auto", "tools": [{"type": "function", "function": {"name": "f"}}], "top_logprobs": 2,
    "top_p": 0.5, "user": "u-1", "verbosity": "low", "web_search_options": {},
}
# Accepted and meaningless here, by the API reference's own account (a tag, a cache hint, a latency hint): the
# request the engine gets is the same without them. Their do-nothing values are accepted the same way.
NO_EFFECT = {"user", "metadata", "store", "parallel_tool_calls", "safety_identifier", "prompt_cache_key",
             "prompt_cache_options", "prompt_cache_retention", "prediction"}
DO_NOTHING = [("service_tier", "auto"), ("service_tier", "default"), ("modalities", ["text"]), ("audio", None),
              ("reasoning_effort", None), ("stream_options", {"include_obfuscation": False}), ("tools", [])]
BY_THE_ROUTE = {"model", "stream", "stream_options"}  # the route answers them (another model's 404, the stream)


def request_outcome(model, body: dict):
    """("ok", TokenizeMsg), or (status, the field the error names) as the server would answer the body."""
    from pydantic import ValidationError

    try:
        return "ok", to_tokenize_msg(0, model.model_validate(body))
    except ValidationError as e:
        return 400, str(e.errors()[0]["loc"][0])
    except APIError as e:
        return e.status, e.param


@pytest.mark.stubs("to_tokenize_msg")
@pytest.mark.parametrize("model, fields", [(CompletionRequest, COMPLETION_FIELDS),
                                           (ChatCompletionRequest, CHAT_FIELDS)], ids=["completions", "chat"])
def test_every_field_of_the_openai_api_is_accepted_with_a_meaning_or_refused_by_name(model, fields):
    """Each field of the API, alone on top of the bare request: refused with a 400 naming it, or accepted; then it
    either reaches the request the engine runs (it changes the TokenizeMsg) or is one the API reference says changes
    nothing (the TokenizeMsg is the same as without it), or the route answers it."""
    try:  # the list must cover what the installed client can send
        if model is CompletionRequest:
            from openai.types.completion_create_params import CompletionCreateParamsBase as Params
        else:
            from openai.types.chat.completion_create_params import CompletionCreateParamsBase as Params
        missing = set(Params.__annotations__) - set(fields)
        assert not missing, f"fields of the openai package's request that this test does not check: {sorted(missing)}"
    except ImportError:
        pass
    required = "prompt" if model is CompletionRequest else "messages"
    base = {required: fields[required], "max_tokens": 5}
    status, plain = request_outcome(model, base)
    assert status == "ok", f"the bare request is refused: {plain}"
    refused, silent = [], []
    for name, value in [*fields.items(), *DO_NOTHING]:
        if name == required or (name == "max_tokens" and model is CompletionRequest and value == 5):
            continue
        if name not in fields:
            continue  # a do-nothing value of a field this endpoint does not have
        body = base | {name: value} | ({"stream": True} if name == "stream_options" else {})
        status, got = request_outcome(model, body)
        if status != "ok":
            if (status, got) != (400, name):
                refused.append(f"{name}={value!r}: {status} naming {got!r}")
            continue
        same = got == plain
        quiet = name in NO_EFFECT or (name, value) in DO_NOTHING
        if quiet and not same:
            silent.append(f"{name}={value!r} changes nothing in the answer, yet the request changed: {got}")
        if not quiet and same and name not in BY_THE_ROUTE:
            silent.append(f"{name}={value!r} was accepted and dropped: the request is the same as without it")
    assert not refused, "a refused field must be a 400 naming it:\n  " + "\n  ".join(refused)
    assert not silent, "\n  ".join(silent)


# ---- in-process: the event stream ----------------------------------------------------------------------------

class FakeRequest:
    def __init__(self, gone_after: int | None = None) -> None:
        self.checks, self.gone_after = 0, gone_after

    async def is_disconnected(self) -> bool:
        self.checks += 1
        return self.gone_after is not None and self.checks > self.gone_after


class FakeFrontend:
    def __init__(self) -> None:
        self.aborted, self.finished = [], []

    def abort(self, uid):
        self.aborted.append(uid)

    def finish(self, uid):
        self.finished.append(uid)


def serving(chat: bool, frontend=None, model: str = "m", **body):
    """The endpoint's serving object for one request with these fields."""
    if chat:
        return OpenAIServingChat(frontend, model, ChatCompletionRequest(messages=[{"role": "user", "content": "x"}],
                                                                        **body))
    return OpenAIServingCompletion(frontend, model, CompletionRequest(prompt="x", **body))


def run_events(replies: list, chat: bool, include_usage: bool, request=None):
    frontend, queue = FakeFrontend(), asyncio.Queue()
    first, *rest = replies
    shape = serving(chat, frontend, stream=True, stream_options={"include_usage": include_usage})

    async def collect():
        for r in rest:
            queue.put_nowait(r)
        out = []
        async for event in shape.events(4, queue, first, request or FakeRequest()):
            out.append(event)
        return out

    return asyncio.run(collect()), frontend


def parse(writes: list[str]) -> list:
    """The events of a stream, whatever the writes that carried them (one write may carry several events)."""
    assert all(w.startswith("data: ") and w.endswith("\n\n") for w in writes), f"not whole SSE events: {writes}"
    events_ = "".join(writes)[:-2].split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events_), f"not SSE events: {events_}"
    return [e[6:] if e[6:] == "[DONE]" else json.loads(e[6:]) for e in events_]


@pytest.mark.stubs("OpenAIServing.events")
@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_the_event_stream_carries_text_reason_usage_and_done(chat):
    replies = [UserReply(4, "Hel", False, None, 5, 1), UserReply(4, "", False, None, 5, 2),
               UserReply(4, "lo", False, None, 5, 3), UserReply(4, "!", True, "stop", 5, 4)]
    out, frontend = run_events(replies, chat, include_usage=True)
    chunks = parse(out)
    assert chunks[-1] == "[DONE]", "the stream ends with data: [DONE]"
    usage, reason, texts = chunks[-2], chunks[-3], chunks[:-3]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 5, "completion_tokens": 4,
                                                         "total_tokens": 9}, f"usage chunk {usage}"
    assert reason["choices"][0]["finish_reason"] == "stop", f"the finish reason chunk: {reason}"
    key = (lambda c: c["choices"][0]["delta"].get("content", "")) if chat else (lambda c: c["choices"][0]["text"])
    assert "".join(key(c) for c in texts) == "Hello!", f"the text chunks add up to the text: {texts}"
    assert all(c["choices"][0]["finish_reason"] is None for c in texts), "text chunks carry no finish reason"
    assert len(texts) == len(replies), f"one chunk per reply (token), empty text too: {len(texts)} for {len(replies)}"
    if chat:
        assert texts[0]["choices"][0]["delta"].get("role") == "assistant", "the first chat chunk names the role"
        assert {c["object"] for c in chunks[:-1]} == {"chat.completion.chunk"}
    assert frontend.finished == [4] and frontend.aborted == [], "a finished stream gives its queue back"
    without, _ = run_events(replies, chat, include_usage=False)
    assert all("usage" not in c for c in parse(without)[:-1]), "no usage chunk unless include_usage"


@pytest.mark.stubs("OpenAIServing.events")
def test_replies_that_wait_together_go_out_in_one_write_one_event_each():
    """Under load a stream finds several replies in its queue: they leave in one write (one trip through Starlette,
    h11 and the socket), but each is still its own event, so a client sees every token."""
    replies = [UserReply(4, t, False, None, 5, i + 1) for i, t in enumerate(["a", "b", "", "c", "d"])]
    replies.append(UserReply(4, "e", True, "length", 5, 6))
    out, frontend = run_events(replies, chat=False, include_usage=False)
    chunks = parse(out)
    assert [c["choices"][0]["text"] for c in chunks[:-2]] == ["a", "b", "", "c", "d", "e"], \
        f"one event per reply, in order: {chunks}"
    assert len(out) < len(replies), f"{len(replies)} replies queued at once took {len(out)} writes"
    assert frontend.finished == [4]


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_a_text_event_is_byte_for_byte_the_chunk_it_stands_for(chat):
    """OpenAIServing.text_event encodes only the text into a template made once per request: its bytes must be
    those of json.dumps of the whole chunk, for any text."""
    from minisgl.server.serving import sse

    shape = serving(chat, model='m"odel\u00e9')
    for text in ["", " word", 'say "hi"\n', "\\ back", "caf\u00e9 \u4f60\u597d \U0001f44d", "\x00\x1f\u2028", "\ufffd"]:
        assert shape.text_event(text) == sse(shape.chunk(text, None)), f"text {text!r}"


@pytest.mark.stubs("OpenAIServing.events")
def test_a_client_that_leaves_aborts_its_request():
    out, frontend = run_events([UserReply(4, "a", False, None, 5, 1)], chat=False, include_usage=False,
                               request=FakeRequest(gone_after=2))
    assert frontend.aborted == [4] and "[DONE]" not in "".join(out), \
        f"the client left before the end: the request must be aborted (aborted {frontend.aborted})"


class QueueFrontend(FakeFrontend):
    """submit() fills the request's queue with the replies the workers would send; every uid is 7."""

    def __init__(self, replies: list) -> None:
        super().__init__()
        self.replies = replies

    def new_uid(self) -> int:
        return 7

    def submit(self, msg, rid, queue, stream) -> None:
        for r in self.replies:
            queue.put_nowait(r)


def run_complete(replies: list, request=None, **body):
    """OpenAIServing.handle on a request of these fields, the workers answering `replies`. The message it submits is
    a plain one, not to_tokenize_msg's (a stub of its own, tested above): handle's tests need only handle."""
    from unittest import mock

    from minisgl.core import SamplingParams
    from minisgl.message import TokenizeMsg

    frontend = QueueFrontend(replies)
    with mock.patch("minisgl.server.serving.to_tokenize_msg", lambda uid, req: TokenizeMsg(uid, "x", SamplingParams())):
        response = asyncio.run(serving(False, frontend, **body).handle(request or FakeRequest()))
    return response, frontend


@pytest.mark.stubs("OpenAIServing.handle")
def test_complete_answers_one_body_or_refuses_before_any_response():
    from minisgl.message import ErrorReply

    replies = [UserReply(7, "a", False, None, 3, 1), UserReply(7, "", False, None, 3, 2),
               UserReply(7, "bc", True, "length", 3, 3)]
    response, frontend = run_complete(replies)
    body = json.loads(response.body)
    assert response.status_code == 200 and body["object"] == "text_completion", f"{response.status_code}: {body}"
    assert (body["choices"][0]["text"], body["choices"][0]["finish_reason"]) == ("abc", "length"), body
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}, body["usage"]
    assert frontend.finished == [7] and frontend.aborted == [], "a finished request gives its queue back"
    with pytest.raises(APIError) as refused:
        run_complete([ErrorReply(7, "the prompt is empty")])
    assert refused.value.status == 400 and "empty" in refused.value.message, "an ErrorReply is a 400"
    _, gone = run_complete([UserReply(7, "a", False, None, 3, 1)], request=FakeRequest(gone_after=1))
    assert gone.aborted == [7], "a client that leaves while waiting aborts its request"
    streamed, frontend = run_complete(replies, stream=True)
    assert streamed.media_type == "text/event-stream" and frontend.aborted == [], \
        "a streamed request gets an event stream (which owns the request from then on)"


def test_a_bad_reply_frame_does_not_stop_the_front_ends_receiver():
    """The thread that reads the workers' replies skips a frame that does not decode and goes on."""
    from minisgl.message import MessageError
    from minisgl.server.frontend import Frontend

    class Replies:
        def __init__(self):
            self.script = [MessageError("garbage"), UserReply(5, "hi", True, "length", 1, 1)]

        def get(self, timeout=None):
            if not self.script:
                time.sleep(timeout or 0)
                return None
            item = self.script.pop(0)
            if isinstance(item, Exception):
                raise item
            return item

    class Workers:
        replies = Replies()

        @staticmethod
        def dead_worker():
            return None

    async def run():
        frontend = Frontend(Workers())
        queue = frontend.queues[5] = asyncio.Queue()
        frontend.start(asyncio.get_running_loop())
        try:
            return await asyncio.wait_for(queue.get(), 60)  # a liveness check: generous on a loaded machine
        finally:
            frontend.stop()

    reply = asyncio.run(run())
    assert reply.incremental_output == "hi", f"the reply after a bad frame must still arrive, got {reply}"


def test_the_reply_thread_outlives_its_event_loop_quietly():
    """A reply that comes after the server's event loop has closed (an abort's reply at shutdown) must end the
    reply thread without an "Event loop is closed" error."""
    import queue

    from minisgl.server.frontend import Frontend

    class Replies:
        def __init__(self):
            self.queue = queue.Queue()

        def get(self, timeout=None):
            try:
                return self.queue.get(timeout=timeout)
            except queue.Empty:
                return None

    class Workers:
        replies = Replies()

        @staticmethod
        def dead_worker():
            return None

    frontend = Frontend(Workers())

    async def serve():
        frontend.start(asyncio.get_running_loop())

    asyncio.run(serve())  # the loop has closed now, the thread still runs
    errors, hook = [], threading.excepthook
    threading.excepthook = lambda args: errors.append(repr(args.exc_value))
    try:
        Workers.replies.queue.put(UserReply(1, "late", True, "abort", 1, 1))
        frontend._thread.join(10)
        ended = not frontend._thread.is_alive()
    finally:
        frontend.stop()
        threading.excepthook = hook
    assert not errors, f"the reply thread died with {errors}"
    assert ended, "the reply thread ends once its event loop is gone"


@pytest.mark.stubs("OpenAIServing.events", "OpenAIServing.handle")
def test_a_stream_cut_by_a_dead_worker_ends_with_the_503_body():
    """A stream that a worker's death (or a shutdown) ends gets, as its last event before [DONE], the same error a
    request that had not started gets as its 503 body."""
    from minisgl.server.frontend import WorkerGone

    reason = "the server is shutting down: the scheduler process died (exit code -9)"
    out, frontend = run_events([UserReply(4, "a", False, None, 5, 1), WorkerGone(reason)], chat=True,
                               include_usage=False)
    chunks = parse(out)
    with pytest.raises(APIError) as refused:
        run_complete([WorkerGone(reason)])
    assert refused.value.status == 503, f"a request that had not started gets a 503, not {refused.value.status}"
    errors = [c for c in chunks if isinstance(c, dict) and "error" in c]
    assert errors == [refused.value.body()], \
        f"the stream's error event {errors} must be the 503 body {refused.value.body()}"
    assert chunks[-1] == "[DONE]" and frontend.aborted == [4], f"then [DONE], and the request is aborted: {chunks}"


@pytest.mark.stubs("OpenAIServing.handle")
def test_response_ids_are_not_guessable():
    replies = [UserReply(7, "a", True, "length", 3, 1)]
    ids = [json.loads(run_complete(list(replies))[0].body)["id"] for _ in range(3)]
    assert all(i.startswith("cmpl-") for i in ids) and len(set(ids)) == 3, f"ids {ids}"
    assert all(len(i) - len("cmpl-") >= 16 and "7" != i[5:] for i in ids), \
        f"an id must be random (at least 16 characters after the prefix), not the request's number: {ids}"


class Recorder:
    def __init__(self) -> None:
        self.sent = []
        self.clock = time.monotonic

    def put(self, msg) -> None:
        self.sent.append((self.clock(), msg))


class FakeWorkers:
    """Workers that take every message and never answer."""

    def __init__(self) -> None:
        self.to_tokenizer, self.to_scheduler = Recorder(), Recorder()


def make_app(api_key: str | None = "s3cret"):
    from fastapi.testclient import TestClient

    from minisgl.server.api_server import create_app
    from minisgl.server.frontend import Frontend
    from minisgl.server.args import ServerArgs

    frontend = Frontend(FakeWorkers())
    app = create_app(frontend, ServerArgs(str(model_path("smollm2")), api_key=api_key), max_model_len=512)
    return app, frontend, TestClient(app, raise_server_exceptions=False)  # no lifespan: no reply thread


class VirtualClock(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to its next timer whenever nothing is ready to run: sleeps, timeouts and
    loop.time() mean what they say, but no wall time passes, so "within a second" holds or fails the same way on
    an idle and on a loaded machine."""

    class Selector(selectors.DefaultSelector):
        def __init__(self, loop: VirtualClock) -> None:
            super().__init__()
            self.loop = loop

        def select(self, timeout=None):
            events = super().select(0 if timeout is not None else None)
            if not events and timeout:
                self.loop.now += timeout  # nothing to do until the next timer: go there at once
            return events

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(self.Selector(self))

    def time(self) -> float:
        return self.now


@pytest.mark.stubs("OpenAIServing.handle")
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream-still-queued"])
@pytest.mark.parametrize("api_key", [None, "s3cret"], ids=["no-key", "api-key"])
def test_a_client_that_leaves_a_waiting_request_aborts_it_within_a_second(stream, api_key):
    """The client hangs up while its request waits (not streamed, or streamed but before its first token): the
    front end must notice (request.is_disconnected(), which any middleware must leave working) and abort it, within
    a second of the event loop's time (a virtual clock: the machine's load cannot change the answer)."""
    from minisgl.message import AbortMsg

    app, frontend, _ = make_app(api_key)
    loop = VirtualClock()
    frontend.workers.to_tokenizer.clock = loop.time
    body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 100, "stream": stream}).encode()
    left_at = 0.3
    state, answered = {"body_sent": False}, []

    async def receive():  # as uvicorn's: the body, then nothing until the client leaves, then a disconnect
        if not state["body_sent"]:
            state["body_sent"] = True
            return {"type": "http.request", "body": body, "more_body": False}
        if loop.time() < left_at:
            await asyncio.sleep(left_at - loop.time())
        return {"type": "http.disconnect"}

    async def send(message):
        answered.append(message)

    async def run():
        headers = [(b"content-type", b"application/json")]
        if api_key:
            headers.append((b"authorization", f"Bearer {api_key}".encode()))
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/completions", "raw_path": b"/v1/completions",
                 "query_string": b"", "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
                 "server": ("127.0.0.1", 8000), "state": {}}
        task = asyncio.create_task(app(scope, receive, send))
        await asyncio.wait([task], timeout=3.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    aborts = [t for t, m in frontend.workers.to_tokenizer.sent if isinstance(m, AbortMsg)]
    assert aborts and 0 <= aborts[0] - left_at < 1.0, \
        f"the request must be aborted within a second of its client leaving: aborted {aborts and aborts[0] - left_at}" \
        f" (the app answered {answered})"


def test_the_api_key_guards_every_route_that_changes_state():
    _, _, http = make_app("s3cret")
    key = {"Authorization": "Bearer s3cret"}
    r = http.post("/abort_request", json={"id": "cmpl-x"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", \
        f"/abort_request without the key: {r.status_code} {r.text}"
    r = http.post("/abort_request", json={"id": "cmpl-x"}, headers=key)
    assert r.status_code == 404, f"with the key, an unknown id is a 404: {r.status_code} {r.text}"
    for path in ("/pause_generation", "/continue_generation?steps=1"):
        r = http.post(path)
        assert r.status_code == 401, f"{path} without the key: {r.status_code} {r.text}"
    assert http.get("/").status_code == 200, "the chat page loads without the key (it asks for it)"


@pytest.mark.parametrize("content, status, param", [
    ("not json", 400, None), ("{}", 400, "id"), ('{"id": 5}', 400, "id"), ('["cmpl-x"]', 400, None),
    ('{"id": "cmpl-x", "more": 1}', 400, "more"), ('{"id": "cmpl-nobody"}', 404, "id"),
], ids=["not-json", "empty", "int-id", "list", "extra", "unknown-id"])
def test_a_bad_abort_request_is_an_openai_error(content, status, param):
    _, _, http = make_app(None)
    r = http.post("/abort_request", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status, f"{content}: {r.status_code} {r.text}"
    assert set(r.json().get("error", {})) == {"message", "type", "param", "code"} and \
        r.json()["error"]["param"] == param, f"{content}: not an OpenAI error naming {param!r}: {r.text}"


def test_continue_generation_refuses_a_bad_step_count():
    _, _, http = make_app(None)
    for query in ("steps=0", "steps=-2", "steps=many"):
        r = http.post(f"/continue_generation?{query}")
        assert r.status_code == 400 and r.json()["error"]["param"] == "steps", f"{query}: {r.status_code} {r.text}"


def test_unknown_paths_wrong_methods_and_model_cards_answer_openai_style():
    _, _, http = make_app(None)
    for method, path, status in [("GET", "/v1/nothing", 404), ("POST", "/nothing", 404),
                                 ("GET", "/v1/completions", 405), ("PUT", "/v1/chat/completions", 405)]:
        r = http.request(method, path)
        error = r.json().get("error", {})
        assert r.status_code == status and set(error) == {"message", "type", "param", "code"} and \
            path in error["message"], f"{method} {path}: {r.status_code} {r.text}"
    card = http.get("/v1/models/smollm2")
    assert card.status_code == 200 and card.json() == http.get("/v1/models").json()["data"][0], card.text
    other = http.get("/v1/models/gpt-4")
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found", other.text


# ---- a real server ------------------------------------------------------------------------------------------

class Server(LocalServer):
    """`python -m minisgl.server` on a bundled model, in a process of its own (chapter 15's LocalServer)."""

    def __init__(self, model: str, *flags: str) -> None:
        super().__init__(model_path(model), *flags)

    def health(self) -> dict:
        r = httpx.get(self.url + "/health", timeout=30)
        assert r.status_code == 200, f"/health answered {r.status_code}: {r.text}"
        return r.json()


SERVER_FLAGS = ("--max-running-reqs", "16", "--max-seq-len", "512", "--cpu-kv-cache-mb", "64",
                "--max-extend-tokens", "64")
TINY_FLAGS = ("--max-seq-len", "128", "--cpu-kv-cache-mb", "8")
LOGGING_FLAGS = ("--max-running-reqs", "4", "--max-seq-len", "512", "--cpu-kv-cache-mb", "64", "--log-requests",
                 "--stream-interval", "4")


@pytest.fixture(scope="module")
def servers():
    """The suite's three servers: "main" on SmolLM2, shared by most tests, and two that a test stops on purpose:
    "sigterm" on SmolLM2 with --log-requests (its answers are slow enough to be still streaming when the signal
    comes) and "dead_worker" on tiny-qwen3. Those two start in the background once the main one is up, while its
    tests run (a start is mostly imports and a model load, one core's work). Each value is a function that waits
    for its server."""
    with ThreadPoolExecutor(3) as pool:
        main = pool.submit(Server, "smollm2", *SERVER_FLAGS)

        def after_main(model: str, *flags: str) -> Server:
            wait([main])
            return Server(model, *flags)

        started = {"main": main, "sigterm": pool.submit(after_main, "smollm2", *LOGGING_FLAGS),
                   "dead_worker": pool.submit(after_main, "tiny-qwen3", *TINY_FLAGS)}
        try:
            yield {name: future.result for name, future in started.items()}
        finally:
            for future in started.values():
                if future.exception() is None:  # one that failed to start has stopped already
                    future.result().stop()  # nothing to do if its test stopped it


@pytest.fixture(scope="module")
def server(servers):
    return servers["main"]()


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    # 300 s, as the 64-stream test: in the stress run (a CPU hog, both xdist workers and a second test run on two
    # cores) a 16-token completion once took over 120 s; a request that never ends still fails at this timeout.
    return OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def settle(server: Server, timeout: float = 30.0) -> dict:
    """/health once nothing runs or waits (aborts travel through two processes)."""
    deadline = time.monotonic() + timeout
    while True:
        status = server.health()
        if not status["running"] and not status["waiting"]:
            return status
        assert time.monotonic() < deadline, f"requests still held after {timeout:.0f} s: {status}"
        time.sleep(0.2)


def assert_nothing_held(server: Server, timeout: float = 30.0) -> None:
    status = settle(server, timeout)
    assert status.get("integrity_checked") == 1 and status["available_slots"] == status["total_slots"], \
        f"every KV slot must be free or cached, and the integrity check must run: {status}"


@pytest.mark.stubs(*SERVER_STUBS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_completions_with_token_ids_equal_hf_greedy(client, stream):
    tok = tokenizer("smollm2")
    for i, text in enumerate(TEXTS[:2]):
        ids = tok.encode(text)
        ignore_eos = i == 1
        want = hf_greedy("smollm2", ids, 12, stop_at_eos=not ignore_eos)
        kw = dict(model="smollm2", prompt=ids, max_tokens=12, temperature=0, extra_body={"ignore_eos": ignore_eos})
        if stream:
            chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
            got = "".join(c.choices[0].text for c in chunks if c.choices)
            reason = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
            usage = chunks[-1].usage
        else:
            r = client.completions.create(**kw)
            got, reason, usage = r.choices[0].text, r.choices[0].finish_reason, r.usage
        assert got == tok.decode(want, skip_special_tokens=True), f"prompt {i}: {got!r}"
        assert (usage.prompt_tokens, usage.completion_tokens) == (len(ids), len(want)), f"prompt {i}: usage {usage}"
        assert reason == ("length" if len(want) == 12 and (ignore_eos or want[-1] != tok.eos_token_id) else "stop")


@pytest.mark.stubs(*SERVER_STUBS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_chat_equals_hf_greedy_on_the_chat_template(client, stream):
    tok = tokenizer("smollm2")
    for question in CHAT[:1]:
        messages = [{"role": "user", "content": question}]
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        want = hf_greedy("smollm2", list(ids), 24, stop_at_eos=True)
        kw = dict(model="smollm2", messages=messages, max_tokens=24, temperature=0)
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kw))
            got = "".join(c.choices[0].delta.content or "" for c in chunks)
            reason = chunks[-1].choices[0].finish_reason
            assert chunks[0].choices[0].delta.role == "assistant", "the first chunk names the role"
        else:
            r = client.chat.completions.create(**kw)
            got, reason = r.choices[0].message.content, r.choices[0].finish_reason
            assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), len(want)), f"usage {r.usage}"
        assert got == tok.decode(want, skip_special_tokens=True), f"{question!r}: {got!r}"
        assert reason == ("stop" if want[-1] == tok.eos_token_id else "length"), f"finish_reason {reason}"


@pytest.mark.stubs(*SERVER_STUBS)
def test_stop_strings_are_cut_exactly_streamed_or_not(client):
    tok = tokenizer("smollm2")
    ids = tok.encode(TEXTS[2])
    full = tok.decode(hf_greedy("smollm2", ids, 24), skip_special_tokens=True)
    stop = full[30:37]  # a piece that does not start or end at a token boundary, most likely
    want = full[:full.index(stop)]
    kw = dict(model="smollm2", prompt=ids, max_tokens=24, temperature=0, stop=[stop, "never appears"])
    r = client.completions.create(**kw)
    assert (r.choices[0].text, r.choices[0].finish_reason) == (want, "stop"), f"{r.choices[0]}"
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw))
    assert streamed == want, f"streamed {streamed!r} != {want!r}"


@pytest.mark.stubs(*SERVER_STUBS)
def test_a_seed_makes_sampling_repeatable(client):
    kw = dict(model="smollm2", prompt=TEXTS[0], max_tokens=16, temperature=1.0)
    a, b = (client.completions.create(seed=123, **kw).choices[0].text for _ in range(2))  # alone: the same batch
    with ThreadPoolExecutor(3) as pool:  # these only need to differ: they may share a batch
        others = set(pool.map(lambda s: client.completions.create(seed=s, **kw).choices[0].text, (1, 2, 3)))
    assert a == b, f"the same seed gave two texts:\n{a!r}\n{b!r}"
    assert len(others | {a}) > 1, "four seeds at temperature 1 gave one text: the seed is not used"


BAD = [  # (body or raw text, status, param or None)
    ("{not json", 400, None), ({"prompt": 5}, 400, "prompt"), ({"prompt": "x", "max_tokens": "9"}, 400, "max_tokens"),
    ({"prompt": "x", "temperature": True}, 400, "temperature"), ({"prompt": ""}, 400, "prompt"),
    ({"prompt": "x", "max_tokens": 600}, 400, "prompt"), ({"prompt": "x", "model": "gpt-4"}, 404, "model"),
    ({"prompt": "x", "n": 0}, 400, "n"), ({"prompt": "x", "unknown_field": 1}, 400, "unknown_field"),
    ({"prompt": [151, 10**9]}, 400, "prompt"), ({}, 400, "prompt"),
]


@pytest.mark.stubs(*SERVER_STUBS)
@pytest.mark.parametrize("body, status, param", BAD, ids=[str(b)[:40] for b, _, _ in BAD])
def test_bad_requests_get_an_openai_error_and_the_server_goes_on(server, body, status, param):
    content = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(server.url + "/v1/completions", content=content, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == status, f"{content}: status {r.status_code}, body {r.text}"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], f"not an OpenAI error: {error}"
    assert error["param"] == param, f"{content}: the error names {error['param']!r}, not {param!r}"
    ok = httpx.post(server.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "temperature": 0}, timeout=60)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2, f"then a good one: {ok.text}"


def test_models_and_api_key():
    from fastapi.testclient import TestClient

    from minisgl.server.api_server import create_app
    from minisgl.server.frontend import Frontend
    from minisgl.server.args import ServerArgs

    args = ServerArgs(str(model_path("smollm2")), api_key="s3cret")
    app = create_app(Frontend(workers=None), args, max_model_len=512)
    http = TestClient(app)  # no lifespan: these routes need no worker
    assert http.get("/v1/models").status_code == 401, "without the key /v1 is closed"
    bad = http.get("/v1/models", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_api_key", bad.text
    ok = http.get("/v1/models", headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and ok.json()["data"][0]["id"] == "smollm2", ok.text
    assert ok.json()["data"][0]["max_model_len"] == 512


async def stream_one(http: httpx.AsyncClient, url: str, ids: list[int], leave_after: int | None) -> dict:
    """One streamed completion; leave_after=k closes the connection after k events (0: before the first)."""
    body = {"prompt": ids, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "stream": True}
    text, reason, events_ = "", None, 0
    async with http.stream("POST", url + "/v1/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        if leave_after == 0:
            return {"left": True}
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            text += chunk["choices"][0]["text"]
            reason = chunk["choices"][0]["finish_reason"] or reason
            events_ += 1
            if leave_after is not None and events_ >= leave_after:
                return {"left": True}
    return {"left": False, "text": text, "reason": reason}


@pytest.mark.stubs(*SERVER_STUBS)
def test_64_concurrent_streams_with_disconnects(server):
    tok = tokenizer("smollm2")
    prompts = [tok.encode(t) for t in TEXTS]
    want = [tok.decode(hf_greedy("smollm2", ids, 8)) for ids in prompts]
    rng = random.Random(0)
    plan = [(i % len(prompts), rng.choice([0, 1, 3, 5]) if i % 3 == 0 else None) for i in range(64)]

    async def run():
        limits = httpx.Limits(max_connections=64)
        # No read limit: a stream's first bytes come with its first token, after the requests queued before it
        # (16 run at a time); on a loaded machine that took over 300 s. A hang still ends at the test's timeout.
        async with httpx.AsyncClient(timeout=httpx.Timeout(300, read=None), limits=limits) as http:
            return await asyncio.gather(*(stream_one(http, server.url, prompts[p], leave) for p, leave in plan))

    results = asyncio.run(run())
    for (p, leave), res in zip(plan, results):
        if leave is None:
            assert not res["left"] and res["text"] == want[p] and res["reason"] == "length", \
                f"a complete stream of prompt {p}: {res} (want {want[p]!r})"
    assert_nothing_held(server)
    ok = httpx.post(server.url + "/v1/completions", json={"prompt": prompts[0], "max_tokens": 8, "temperature": 0,
                                                          "ignore_eos": True}, timeout=60)
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"] == want[0], "the server still serves"


def _answered_early(client: socket.socket) -> None:
    """Fails at once with the server's answer if one came before the request reached the scheduler (an error)."""
    client.setblocking(False)
    try:
        answer = client.recv(4096)
    except BlockingIOError:
        return
    finally:
        client.setblocking(True)
    raise AssertionError(f"the request was answered before it reached the scheduler: {answer.decode(errors='replace')}")


@pytest.mark.stubs(*SERVER_STUBS)
def test_a_client_that_leaves_a_non_streamed_request_frees_it(server):
    """The client gives up on a long answer that is not streamed (it closes its connection): the request is aborted
    in the workers, not run to its end for nobody. (How soon, within a second, is checked in-process above.) The
    client leaves once the request decodes in a paused server, so the request is still there, whatever the
    machine's speed, and no timer decides when the client goes; the abort reaches the scheduler while paused. The
    request's end is read from /metrics: finish reason "abort", and only the tokens of the batches it ran."""
    body = {"prompt": TEXTS[1], "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    ok = httpx.post(server.url + "/v1/completions", json=body | {"max_tokens": 2}, timeout=60)
    assert ok.status_code == 200, ok.text
    settle(server)
    before = scrape(server)
    where = urlsplit(server.url)
    payload = json.dumps(body).encode()
    hold(server.url, 0)
    client = socket.create_connection((where.hostname, where.port), timeout=60)
    try:
        client.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {where.netloc}\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        health_until(server.url, lambda s: s.get("waiting") == 1, "the request reaches the scheduler",
                     check=lambda: _answered_early(client))
        ran = step_until(server.url, lambda s: s["running"] == 1, "the request decodes")
        client.close()  # no answer can have come: the request is paused mid-answer
        health_until(server.url, lambda s: s.get("running") == 0 and s.get("waiting") == 0,
                     "the request left by its client is aborted in the scheduler (paused)")
    finally:
        client.close()
        hold(server.url, None)
    assert_nothing_held(server)
    after = scrape(server)
    aborted = metric(after, "minisgl_requests_finished_total", finish_reason="abort") - \
        metric(before, "minisgl_requests_finished_total", finish_reason="abort")
    generated = metric(after, "minisgl_generation_tokens_total") - metric(before, "minisgl_generation_tokens_total")
    assert aborted == 1 and generated < 400, f"the request left by its client must be aborted: {aborted} aborted, " \
        f"{generated:.0f} tokens generated (it had decoded when paused: {ran})"


def scrape(server: Server) -> dict:
    """/metrics parsed with prometheus_client's own parser: {(sample name, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(server.url + "/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), f"{r.status_code} {r.text}"
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def metric(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(({"model": "smollm2"} | labels).items()))), 0.0)


@pytest.mark.stubs(*SERVER_STUBS)
def test_fields_that_change_nothing_are_accepted(client):
    """user, store, metadata, parallel_tool_calls, a message's name, an assistant's null content: accepted; the
    developer role is the system role."""
    def ask(role: str, **extra) -> str:
        messages = [{"role": role, "content": "Answer in one word."}, {"role": "user", "content": "Hi", "name": "ann"},
                    {"role": "assistant", "content": None}, {"role": "user", "content": CHAT[0]}]
        r = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=8, temperature=0, **extra)
        return r.choices[0].message.content

    extra = dict(user="u-1", store=False, metadata={"run": "test"}, parallel_tool_calls=False)
    assert ask("developer", **extra) == ask("system"), "the developer role is the system role of the template"


@pytest.mark.stubs(*SERVER_STUBS)
def test_metrics_in_prometheus_text_format(server):
    settle(server)
    before = scrape(server)
    ids = tokenizer("smollm2").encode(TEXTS[0])
    r = httpx.post(server.url + "/v1/completions", json={"prompt": ids, "max_tokens": 8, "temperature": 0,
                                                         "ignore_eos": True}, timeout=60)
    assert r.status_code == 200, r.text
    after = scrape(server)
    for name, want in [("minisgl_prompt_tokens_total", len(ids)), ("minisgl_generation_tokens_total", 8),
                       ("minisgl_time_to_first_token_seconds_count", 1), ("minisgl_time_per_output_token_seconds_count", 1),
                       ("minisgl_e2e_request_latency_seconds_count", 1)]:
        assert metric(after, name) - metric(before, name) == want, \
            f"{name} grew by {metric(after, name) - metric(before, name)}, not {want}"
    assert metric(after, "minisgl_requests_finished_total", finish_reason="length") - \
        metric(before, "minisgl_requests_finished_total", finish_reason="length") == 1
    assert metric(after, "minisgl_num_requests_running") == 0 and metric(after, "minisgl_kv_pages_used") == 0, after
    assert metric(after, "minisgl_kv_pages_total") > 0

    body = {"prompt": TEXTS[1], "max_tokens": 400, "temperature": 0, "ignore_eos": True, "stream": True}

    scraped = threading.Event()

    def first_event() -> str:  # the client stays until /metrics is read, then leaves, which aborts the request
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as stream:
            lines = stream.iter_lines()  # held: a dropped iterator closes the connection (and aborts the request)
            line = next(lines)
            scraped.wait(120)
            return line

    hold(server.url, 0)  # paused: the request decodes while /metrics is read, however fast the machine
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(first_event)
            health_until(server.url, lambda s: s.get("waiting") == 1, "the request reaches the scheduler",
                         check=lambda: first.result() if first.done() else None)
            step_until(server.url, lambda s: s["running"] == 1, "the request decodes")
            during = scrape(server)
            scraped.set()
            assert first.result(120).startswith("data: "), "the stream's first event"
    finally:
        scraped.set()
        hold(server.url, None)
    assert metric(during, "minisgl_num_requests_running") == 1 and metric(during, "minisgl_kv_pages_used") > 0, \
        f"while one request decodes: {during}"
    assert_nothing_held(server)


@pytest.mark.stubs(*SERVER_STUBS)
def test_the_startup_line_and_the_request_log(servers):
    s = servers["sigterm"]()  # started with --log-requests
    line = next((x for x in s.tail().splitlines() if x.startswith("serving ")), None)
    for part in (f"chat page {s.url}/", "KV pool ", "pages of ", "max_seq_len 512", "up to 4 running requests"):
        assert line is not None and part in line, f"the start-up line names {part!r}: {line!r}"
    r = httpx.post(s.url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 5, "ignore_eos": True},
                   timeout=60)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 60  # the line comes as the request ends: a wait for it, not a speed limit
    while not (logged := [x for x in s.tail().splitlines() if r.json()["id"] in x]):
        assert time.monotonic() < deadline, f"no log line names {r.json()['id']}:\n{s.tail()}"
        time.sleep(0.1)
    assert "3 prompt + 5 completion tokens" in logged[0] and "finish length" in logged[0], logged[0]


@pytest.mark.stubs(*SERVER_STUBS)
def test_a_stream_interval_sends_several_tokens_per_event(servers):
    """--stream-interval 4: a stream gets the first token's event at once, then one every 4 tokens with the text of
    all of them, and the last; the text is the same as without."""
    s = servers["sigterm"]()  # started with --stream-interval 4
    body = {"prompt": TEXTS[0], "max_tokens": 13, "temperature": 0, "ignore_eos": True}
    whole = httpx.post(s.url + "/v1/completions", json=body, timeout=120)
    assert whole.status_code == 200, whole.text
    texts = []
    with httpx.stream("POST", s.url + "/v1/completions", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read().decode()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                if choice["finish_reason"] is None:
                    texts.append(choice["text"])
    assert "".join(texts) == whole.json()["choices"][0]["text"], f"the streamed text {texts} differs"
    assert len(texts) == 4, f"13 tokens at an interval of 4: events at tokens 1, 5, 9 and 13, got {len(texts)}"


@pytest.mark.stubs(*SERVER_STUBS)
def test_abort_request_ends_a_stream_with_abort(server):
    """/abort_request with a stream's id, sent once its first event has come, while the server is paused (so the
    stream cannot end first, however fast the machine): the stream ends with "abort"."""
    body = {"prompt": TEXTS[1], "max_tokens": 300, "temperature": 0, "ignore_eos": True, "stream": True}
    chunks, first = [], threading.Event()

    def stream() -> None:
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as r:
            if r.status_code != 200:  # it could not start: its error (HTTP status and body) says why
                first.set()
                raise AssertionError(f"HTTP {r.status_code}: {r.read().decode()}")
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunks.append(json.loads(line[6:]))
                    first.set()

    hold(server.url, 0)
    try:
        with ThreadPoolExecutor(1) as pool:
            streamed = pool.submit(stream)
            # a stream refused before it reaches the scheduler fails at once with its own error, not after a wait
            health_until(server.url, lambda s: s.get("waiting") == 1, "the request reaches the scheduler",
                         check=lambda: streamed.result() if streamed.done() else None)
            step_until(server.url, lambda s: s["running"] == 1, "the request decodes")
            assert first.wait(120), "the stream's first event never came"
            if not chunks:
                streamed.result()  # its error
            a = httpx.post(server.url + "/abort_request", json={"id": chunks[0]["id"]}, timeout=30)
            assert a.status_code == 200, a.text
            hold(server.url, None)
            streamed.result(120)
    finally:
        hold(server.url, None)
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert reasons[-1] == "abort" and len(reasons) < 300, f"the stream ends with 'abort' early: {reasons[-3:]}"
    assert_nothing_held(server)


@pytest.mark.stubs(*SERVER_STUBS)
def test_a_dead_worker_makes_the_server_answer_503_and_exit(servers):
    s = servers["dead_worker"]()
    try:
        ok = httpx.post(s.url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2}, timeout=60)
        assert ok.status_code == 200, ok.text
        scheduler = next(c for c in s.children if "multiprocessing" in " ".join(c.cmdline()) and
                         "resource_tracker" not in " ".join(c.cmdline()) and c.pid == min(
                             p.pid for p in s.children if "resource_tracker" not in " ".join(p.cmdline())))
        scheduler.kill()
        try:
            r = httpx.post(s.url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 50}, timeout=60)
            assert r.status_code == 503 and "died" in r.json()["error"]["message"], f"got {r.status_code}: {r.text}"
        except httpx.TransportError:
            pass  # it had already exited: also an answer, not a hang
        assert s.proc.wait(30) == 1, "a server whose worker died exits with code 1"
        s.stop()  # it has exited: this only waits for its workers (and kills what is left)
        assert s.left_behind == [], f"no worker is left running: {s.left_behind}"
    finally:
        s.stop(signal.SIGKILL)


def open_requests(server: Server) -> tuple[ThreadPoolExecutor, list]:
    """A long stream (once its first event has come) and a long non-streamed request, both decoding in a paused
    server: neither can end before the test lets it, however fast the machine."""
    body = {"prompt": TEXTS[1], "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    first = threading.Event()

    def stream() -> list:
        events_ = []
        with httpx.stream("POST", url + "/v1/completions", json=body | {"stream": True}, timeout=120) as r:
            if r.status_code != 200:
                first.set()
                return [f"HTTP {r.status_code}: {r.read().decode()}"]
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events_.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
                    first.set()
        return events_

    def whole() -> httpx.Response:
        return httpx.post(url + "/v1/completions", json=body, timeout=120)

    def ended_early() -> None:  # it could not start: its error (HTTP status and body) says why
        if futures[0].done():
            raise AssertionError(f"the stream ended at once: {futures[0].result()}")
        if futures[1].done():
            raise AssertionError(f"the non-streamed request ended at once: {futures[1].result().text}")

    url = server.url
    hold(url, 0)
    pool = ThreadPoolExecutor(2)
    futures = [pool.submit(stream), pool.submit(whole)]
    health_until(url, lambda s: s.get("waiting") == 2, "both requests reach the scheduler", check=ended_early)
    step_until(url, lambda s: s["running"] == 2, "both requests decode")
    assert first.wait(120), "the stream's first event never came"
    ended_early()
    return pool, futures


@pytest.mark.stubs(*SERVER_STUBS)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "group-SIGTERM"])
def test_a_signal_ends_open_streams_and_stops_every_process(servers, sig):
    """Ctrl-C (SIGINT to the server), or SIGTERM to its whole process group as a supervisor sends it: open streams
    end with an error event and [DONE], a waiting request gets a 503, the server says "stopped" with no traceback
    and exits 0 (the workers, in a group of their own, are stopped by it: no crash is reported), nothing is left."""
    s = servers["main" if sig == signal.SIGINT else "sigterm"]()  # the shared server: this is the last test
    try:
        pool, (stream, whole) = open_requests(s)
        code = s.stop(sig, group=sig == signal.SIGTERM)
        events_, response = stream.result(30), whole.result(30)
        pool.shutdown()
        output = s.tail()
        assert code == 0, f"Ctrl-C / SIGTERM is a clean stop (exit 0), got {code}; the server's last lines:\n{output}"
        assert s.left_behind == [], f"every worker process is gone: {s.left_behind} are left"
        assert events_[-1] == "[DONE]" and events_[-2].get("error", {}).get("type") == "service_unavailable", \
            f"an open stream ends with an error event and [DONE], got {events_[-3:]}"
        assert response.status_code == 503, f"a waiting request gets a 503: {response.status_code} {response.text}"
        assert output.splitlines()[-1] == "stopped", f"the server's last line is 'stopped':\n{output}"
        for bad in ("Traceback", "Event loop is closed", "Exception in thread", "died", "error:"):
            assert bad not in output, f"{bad!r} in the server's output:\n{output}"
    finally:
        s.stop(signal.SIGKILL)  # whatever failed above, no server outlives the test
