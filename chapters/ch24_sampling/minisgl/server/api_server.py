"""The HTTP front end: an OpenAI-compatible API over the worker processes (FastAPI + uvicorn).

Each request gets a uid (for the messages) and a random response id (for the client), and a queue. A TokenizeMsg
starts it in the tokenizer process; a thread receives the replies (UserReply pieces, ErrorReply, StatusReply) and
hands each to its request's queue on the event loop, timing the request on the way (/metrics). A streamed request
sends every piece as a server-sent event; the others wait for the end. A client that goes away (or an
/abort_request) aborts its request. A worker that dies makes every request answer 503 and the server exit; a
shutdown (Ctrl-C, SIGTERM) ends every open stream with an error event first.

Chapter 24: a request with n > 1 is n requests of the engine (choices 0 to n-1, seeds seed, seed + 1, ...) that
share one queue. Choice 0 goes first; the others are sent when its first token arrives, by which time its prompt
is in the prefix cache, so they compute none of it again. Log-probabilities go into OpenAI's shapes: the chat
API's `logprobs.content`, the legacy completions' `tokens` / `token_logprobs` / `top_logprobs` / `text_offset`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from minisgl.message import (AbortMsg, ErrorReply, GetStatusMsg, HoldMsg, MessageError, StatusReply, UserReply,
                             unwrap)
from minisgl.message.frontend import TokenLogprob
from minisgl.server.args import ServerArgs
from minisgl.server.launch import Workers
from minisgl.server.metrics import Metrics, RequestTimes, request_line
from minisgl.server.protocol import (AbortRequest, APIError, ChatCompletionRequest, CompletionRequest,
                                     to_tokenize_msg)

DISCONNECT_POLL_S = 0.25  # how often a waiting request checks that its client is still there
CHAT_PAGE = Path(__file__).with_name("chat.html")


class WorkerGone:
    """Put in every waiting queue when a worker dies, or when the server shuts down."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def new_request_id(chat: bool) -> str:
    """A response id as OpenAI's look: a prefix and a random part, so that nobody can guess another client's id
    (POST /abort_request takes it)."""
    return f"{'chatcmpl' if chat else 'cmpl'}-{secrets.token_hex(12)}"


class Frontend:
    """The front end's side of the workers: uids, one queue per request, and the thread that fills them.

    `metrics` (optional) gets each request's first token and its end; with `log_requests` a line per finished
    request is printed too."""

    def __init__(self, workers: Workers, on_dead=lambda reason: None, metrics: Metrics | None = None,
                 log_requests: bool = False, stream_interval: int = 1) -> None:
        self.workers = workers
        self.stream_interval = stream_interval  # a streamed request's reply every this many tokens (1: each token)
        self.on_dead = on_dead
        self.metrics, self.log_requests = metrics, log_requests
        self.queues: dict[int, asyncio.Queue] = {}
        self.ids: dict[str, list[int]] = {}  # response id -> the uids of its choices, while they run
        self.rids: dict[int, str] = {}  # and back
        self.times: dict[int, RequestTimes] = {}  # uid -> its times, until its last reply
        self.uids = itertools.count()
        self.dead: str | None = None  # why a worker died
        self.closing: str | None = None  # why the server stops (a shutdown)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._thread = threading.Thread(target=self._receive, name="minisgl-replies", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the reply thread (safe to call twice). Called while the event loop still runs: a reply handed to
        a closed loop would end the thread with "Event loop is closed"."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _receive(self) -> None:
        """Runs in a thread (only it touches the reply socket): replies go to the event loop, in order."""
        while not self._stop.is_set():
            try:
                msg = self.workers.replies.get(timeout=0.2)
            except MessageError as e:  # a frame that does not decode: reported, the next one is read
                print(f"front end: dropped a bad frame: {e}", file=sys.stderr, flush=True)
                continue
            if msg is not None:
                call, args = self._dispatch, (unwrap(msg),)
            elif (reason := self.workers.dead_worker()) is not None:
                call, args = self._fail_all, (reason,)
            else:
                continue
            try:
                self.loop.call_soon_threadsafe(call, *args)
            except RuntimeError:  # the loop has closed: the server is gone, and nobody waits for replies
                return
            if call == self._fail_all:
                return

    def _dispatch(self, replies: list) -> None:
        for reply in replies:
            if reply.uid in self.times:
                self._time(reply)
            queue = self.queues.get(reply.uid)
            if queue is not None:  # else: its client left, and the abort's reply came back
                queue.put_nowait(reply)

    def _time(self, reply) -> None:
        """A request's first token and its end, for /metrics and the request log."""
        now = time.perf_counter()
        times = self.times[reply.uid]
        if not isinstance(reply, UserReply):  # refused: it never ran
            del self.times[reply.uid]
            return
        if times.first_token is None and self.metrics is not None:
            self.metrics.first_token(times, now)
        elif times.first_token is None:
            times.first_token = now
        if reply.finished:
            del self.times[reply.uid]
            tpot = None
            if self.metrics is not None:
                tpot = self.metrics.request_finished(times, now, reply.prompt_tokens, reply.completion_tokens,
                                                     reply.finish_reason)
            if self.log_requests:
                print(request_line(times, now, reply.prompt_tokens, reply.completion_tokens, reply.finish_reason,
                                   tpot), flush=True)

    def _fail_all(self, reason: str) -> None:
        self.dead = reason
        self._end_all(f"the server is shutting down: {reason}")
        self.on_dead(reason)

    def close(self, reason: str = "the server is shutting down") -> None:
        """The server stops: every waiting request answers 503 and every open stream ends with an error event."""
        if self.closing is None and self.dead is None:
            self.closing = reason
            self._end_all(reason)

    def _end_all(self, reason: str) -> None:
        for queue in self.queues.values():
            queue.put_nowait(WorkerGone(reason))
        self.times.clear()

    def check_alive(self) -> None:
        if self.dead is not None or self.closing is not None:
            why = self.closing if self.dead is None else f"the server is shutting down: {self.dead}"
            raise APIError(503, why, type="service_unavailable")

    def submit(self, req: CompletionRequest | ChatCompletionRequest, rid: str) -> tuple[int, asyncio.Queue]:
        """Start a request under the response id `rid`: its uid and the queue its replies arrive in (APIError if
        it is refused here)."""
        self.check_alive()
        queue = asyncio.Queue()
        return self._start(req, rid, queue, choice=0), queue

    def submit_more(self, req: CompletionRequest | ChatCompletionRequest, rid: str, queue: asyncio.Queue,
                    ) -> list[int]:
        """Chapter 24: choices 1 to n-1 of a request whose choice 0 was submitted; their uids, replies in `queue`."""
        self.check_alive()
        return [self._start(req, rid, queue, choice) for choice in range(1, req.n)]

    def _start(self, req: CompletionRequest | ChatCompletionRequest, rid: str, queue: asyncio.Queue,
               choice: int) -> int:
        uid = next(self.uids)
        msg = to_tokenize_msg(uid, req)
        params = msg.sampling_params
        seed = None if params.seed is None else params.seed + choice
        msg.sampling_params = dataclasses.replace(params, n=1, seed=seed)  # one choice each
        # A stream gets a reply every stream_interval tokens; an answer sent whole needs only its first token's (the
        # request runs: TTFT) and its last.
        msg.stream_interval = self.stream_interval if req.stream else 0
        self.queues[uid] = queue
        self.ids.setdefault(rid, []).append(uid)
        self.rids[uid] = rid
        self.times[uid] = RequestTimes(rid)
        self.workers.to_tokenizer.put(msg)
        return uid

    def uids_of(self, rid: str) -> list[int]:
        """The uids of the running choices of the request with this response id."""
        return list(self.ids.get(rid, []))

    def abort(self, uid: int) -> None:
        if self.queues.pop(uid, None) is not None and self.dead is None:
            self.workers.to_tokenizer.put(AbortMsg(uid))
        self._forget(uid)

    def finish(self, uid: int) -> None:
        self.queues.pop(uid, None)
        self._forget(uid)

    def _forget(self, uid: int) -> None:
        rid = self.rids.pop(uid, None)
        uids = self.ids.get(rid, [])
        if uid in uids:
            uids.remove(uid)
        if not uids:
            self.ids.pop(rid, None)

    async def status(self, timeout: float = 10.0, hold: bool = False, steps: int | None = None) -> dict:
        """The scheduler's status; with `hold`, once a HoldMsg(steps) is in effect (the test hook's routes)."""
        self.check_alive()
        uid = next(self.uids)
        queue = self.queues[uid] = asyncio.Queue()
        try:
            self.workers.to_scheduler.put(HoldMsg(uid, steps) if hold else GetStatusMsg(uid))
            reply = await asyncio.wait_for(queue.get(), timeout)
        except asyncio.TimeoutError:
            raise APIError(503, f"the scheduler did not answer in {timeout:.0f} s", type="service_unavailable") from None
        finally:
            self.queues.pop(uid, None)
        if isinstance(reply, WorkerGone):
            raise APIError(503, reply.reason, type="service_unavailable")
        assert isinstance(reply, StatusReply)
        return reply.status


async def next_reply(queue: asyncio.Queue, request: Request) -> UserReply | ErrorReply | WorkerGone | None:
    """The request's next reply, or None once its client has disconnected."""
    while True:
        if not queue.empty():  # no waiting, no timer: the common case under load
            return queue.get_nowait()
        try:
            async with asyncio.timeout(DISCONNECT_POLL_S):
                return await queue.get()
        except TimeoutError:
            if await request.is_disconnected():
                return None


async def next_replies(queue: asyncio.Queue, request: Request) -> list | None:
    """Every reply of the request that is there now, at least one (waiting for it as next_reply does); None once
    its client has disconnected."""
    reply = await next_reply(queue, request)
    if reply is None:
        return None
    replies = [reply]
    while not queue.empty():
        replies.append(queue.get_nowait())
    return replies


def error_of(reply: ErrorReply | WorkerGone) -> APIError:
    """The error a reply that is not text stands for: a refused prompt is a 400, a dead worker or a shutdown a 503.
    A request that has not answered yet gets it as its response, a stream as its last event."""
    if isinstance(reply, WorkerGone):
        return APIError(503, reply.reason, type="service_unavailable")
    return APIError(400, reply.message, param=reply.param)


def raise_for(reply: ErrorReply | WorkerGone) -> None:
    raise error_of(reply)


class Completion:
    """How one endpoint's responses look: plain completions or chat (object names, where the text goes)."""

    def __init__(self, chat: bool, model: str, rid: str | None = None) -> None:
        self.chat, self.model = chat, model
        self.id = rid or new_request_id(chat)
        self.created = int(time.time())
        self._templates: dict[int, tuple[str, str, str]] = {}  # choice -> (before, after, empty event)
        self._offsets: dict[int, int] = {}  # choice -> characters of its text so far (completions' text_offset)

    def text_event(self, text: str, index: int = 0) -> str:
        """The server-sent event of a chunk with this text (not the first of a chat), byte for byte
        sse(self.chunk(text, None, index=index)), from a template made once per choice: only the text is encoded
        each time."""
        if index not in self._templates:
            mark = "\x00text\x00"
            before, after = sse(self.chunk(mark, None, index=index)).split(json.dumps(mark, ensure_ascii=False))
            self._templates[index] = (before, after, sse(self.chunk("", None, index=index)))
        before, after, empty = self._templates[index]
        if not text:
            return empty
        return before + json.dumps(text, ensure_ascii=False) + after

    def _object(self, obj: str, choices: list, usage: dict | None = None) -> dict:
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if usage is not None:
            out["usage"] = usage
        return out

    def full(self, texts: list[str], replies: list[UserReply], logprobs: list[list[TokenLogprob] | None]) -> dict:
        """The whole answer: each choice's text, last reply and log-probabilities (chapter 24; None where not
        asked), in choice order."""
        choices = []
        for i, (text, last, lps) in enumerate(zip(texts, replies, logprobs)):
            if self.chat:
                choices.append({"index": i, "message": {"role": "assistant", "content": text},
                                "logprobs": self.logprobs(lps, i), "finish_reason": last.finish_reason})
            else:
                choices.append({"index": i, "text": text, "logprobs": self.logprobs(lps, i),
                                "finish_reason": last.finish_reason})
        return self._object("chat.completion" if self.chat else "text_completion", choices, usage_of(*replies))

    def chunk(self, text: str | None, finish_reason: str | None, first: bool = False, index: int = 0,
              logprobs: list[TokenLogprob] | None = None) -> dict:
        if self.chat:
            delta = ({"role": "assistant", "content": ""} if first else {}) | ({"content": text} if text else {})
            choice = {"index": index, "delta": delta, "logprobs": self.logprobs(logprobs, index),
                      "finish_reason": finish_reason}
            return self._object("chat.completion.chunk", [choice])
        choice = {"index": index, "text": text or "", "logprobs": self.logprobs(logprobs, index),
                  "finish_reason": finish_reason}
        return self._object("text_completion", [choice])

    def usage_chunk(self, *replies: UserReply) -> dict:
        return self._object("chat.completion.chunk" if self.chat else "text_completion", [], usage_of(*replies))

    def logprobs(self, entries: list[TokenLogprob] | None, index: int = 0) -> dict | None:
        """Chapter 24: the `logprobs` of a choice (or of a chunk of it), in OpenAI's shape for this endpoint."""
        if entries is None:
            return None
        if self.chat:
            return {"content": [{"token": e.token, "logprob": e.logprob, "bytes": list(e.token.encode()),
                                 "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())}
                                                  for t, v in zip(e.top_tokens, e.top_logprobs)]}
                                for e in entries], "refusal": None}
        offsets, at = [], self._offsets.get(index, 0)
        for e in entries:
            offsets.append(at)
            at += len(e.token)
        self._offsets[index] = at
        return {"tokens": [e.token for e in entries], "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [dict(zip(e.top_tokens, e.top_logprobs)) for e in entries], "text_offset": offsets}


def usage_of(*replies: UserReply) -> dict:
    """Usage of a request: its prompt once, the tokens of every choice."""
    prompt, completion = replies[0].prompt_tokens, sum(r.completion_tokens for r in replies)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


async def complete(frontend: Frontend, req: CompletionRequest | ChatCompletionRequest, request: Request,
                   model: str) -> JSONResponse | StreamingResponse:
    """Run one request to the end (one JSON body) or stream it (server-sent events, then `data: [DONE]`). With
    n > 1 (chapter 24) the other choices start once choice 0's first reply is in: they find its prompt cached."""
    shape = Completion(isinstance(req, ChatCompletionRequest), model)
    uid, queue = frontend.submit(req, shape.id)
    uids = [uid]
    finished = False
    try:
        reply = await next_reply(queue, request)
        if reply is None:
            return JSONResponse({}, status_code=499)  # nobody reads it: the client closed the connection
        if not isinstance(reply, UserReply):
            raise_for(reply)
        if req.n > 1:
            uids += frontend.submit_more(req, shape.id, queue)
        if req.stream:
            finished = True  # from here on the event stream owns the request
            return StreamingResponse(events(frontend, uids if req.n > 1 else uid, queue, reply, shape, request, req),
                                     media_type="text/event-stream")
        texts, last, logprobs = {u: "" for u in uids}, {}, {u: None for u in uids}
        while True:
            texts[reply.uid] += reply.incremental_output
            if reply.logprobs is not None:
                logprobs[reply.uid] = (logprobs[reply.uid] or []) + reply.logprobs
            if reply.finished:
                last[reply.uid] = reply
            if len(last) == len(uids):
                break
            reply = await next_reply(queue, request)
            if reply is None:
                return JSONResponse({}, status_code=499)
            if not isinstance(reply, UserReply):
                raise_for(reply)
        finished = True
        return JSONResponse(shape.full([texts[u] for u in uids], [last[u] for u in uids], [logprobs[u] for u in uids]))
    finally:
        for u in uids:
            if not finished:
                frontend.abort(u)
            elif not req.stream:
                frontend.finish(u)


async def events(frontend: Frontend, uid: int | list[int], queue: asyncio.Queue, reply: UserReply,
                 shape: Completion, request: Request, req: CompletionRequest | ChatCompletionRequest,
                 ) -> AsyncIterator[str]:
    """The server-sent events of a streamed request, starting from its first reply. `uid` is the request's, or
    the list of its choices' (chapter 24: each chunk names its choice by `index`, and the usage chunk and
    `[DONE]` follow the last choice's end)."""
    uids = [uid] if isinstance(uid, int) else list(uid)
    index = {u: i for i, u in enumerate(uids)}
    last: dict[int, UserReply] = {}
    started: set[int] = set()
    done = False
    try:
        replies = [reply]
        while True:
            out = []
            for reply in replies:
                if not isinstance(reply, UserReply):
                    out += [sse(error_of(reply).body()), sse("[DONE]")]
                    yield "".join(out)
                    return
                i = index[reply.uid]
                if reply.uid not in started or reply.logprobs is not None:
                    out.append(sse(shape.chunk(reply.incremental_output, None, first=reply.uid not in started,
                                               index=i, logprobs=reply.logprobs)))
                    started.add(reply.uid)
                else:
                    out.append(shape.text_event(reply.incremental_output, i))
                if reply.finished:
                    last[reply.uid] = reply
                    out.append(sse(shape.chunk(None, reply.finish_reason, index=i)))
                    if len(last) < len(uids):
                        continue
                    if req.stream_options is not None and req.stream_options.include_usage:
                        out.append(sse(shape.usage_chunk(*(last[u] for u in uids))))
                    out.append(sse("[DONE]"))
                    done = True
                    break
            yield "".join(out)
            if done:
                return
            replies = await next_replies(queue, request)
            if replies is None:
                return
    finally:
        for u in uids:
            if done:
                frontend.finish(u)
            else:
                frontend.abort(u)


class APIKeyMiddleware:
    """With an API key set, every /v1 route and every request that may change something (any method but GET,
    HEAD, OPTIONS: /abort_request) needs `Authorization: Bearer <key>`; the chat page, /health and /metrics stay
    open. A plain ASGI middleware: Starlette's @app.middleware("http") (BaseHTTPMiddleware) would hand the
    endpoints a `receive` that never reports a disconnect, so a request waiting for its answer would outlive its
    client."""

    OPEN_METHODS = ("GET", "HEAD", "OPTIONS")

    def __init__(self, app, api_key: str | None) -> None:
        self.app = app
        self.want = f"Bearer {api_key}".encode() if api_key else None

    async def __call__(self, scope, receive, send) -> None:
        if self.want is not None and scope["type"] == "http" and (
                scope["path"].startswith("/v1") or scope["method"] not in self.OPEN_METHODS):
            got = dict(scope["headers"]).get(b"authorization", b"")
            if not secrets.compare_digest(got, self.want):
                body = APIError(401, "invalid or missing API key", code="invalid_api_key").body()
                await JSONResponse(body, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(frontend: Frontend, args: ServerArgs, max_model_len: int, page_size: int = 1) -> FastAPI:
    model = args.served_model_name
    if frontend.metrics is None:
        frontend.metrics = Metrics(model)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        frontend.start(asyncio.get_running_loop())  # replies reach the queues from the server's own loop
        print(startup_line(args, frontend.workers), flush=True)
        yield
        frontend.stop()  # while the loop still runs (see Frontend.stop)

    app = FastAPI(title="mini-sglang", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.add_middleware(APIKeyMiddleware, api_key=args.api_key)

    @app.exception_handler(APIError)
    async def api_error(_: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(Exception)
    async def internal_error(_: Request, e: Exception) -> JSONResponse:
        """A bug, not a bad request: the client gets a 500 that names it, and the server goes on serving."""
        error = APIError(500, f"internal error: {type(e).__name__}: {e}", type="internal_server_error")
        return JSONResponse(error.body(), status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        """An unknown path or a wrong method, in OpenAI's words and error shape."""
        where = f"{request.method} {request.url.path}"
        message = {404: f"Invalid URL ({where})", 405: f"Invalid method for URL ({where})"}.get(e.status_code,
                                                                                              str(e.detail))
        return JSONResponse(APIError(e.status_code, message).body(), status_code=e.status_code, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, e: RequestValidationError) -> JSONResponse:
        err = e.errors()[0]
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query")]
        where = ".".join(loc)
        if err.get("type") == "json_invalid":
            return JSONResponse(APIError(400, f"the body is not valid JSON: {err.get('msg')}").body(), 400)
        if err.get("type") == "extra_forbidden":
            message = f"unsupported parameter: {where}"
        else:
            message = f"{where or 'body'}: {err.get('msg')}"
        return JSONResponse(APIError(400, message, param=loc[0] if loc else None).body(), status_code=400)

    def check_model(name: str | None) -> None:
        if name is not None and name != model:
            raise APIError(404, f"the model {name!r} does not exist; this server has {model!r}", param="model",
                           code="model_not_found")

    card = {"id": model, "object": "model", "created": 0, "owned_by": "minisgl", "max_model_len": max_model_len}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", **(await frontend.status())}

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus' text format (see metrics.py)."""
        status = await frontend.status()
        return Response(frontend.metrics.render(status, page_size), media_type=Metrics.CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{name:path}")
    async def model_card(name: str) -> dict:
        check_model(name)
        return card

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        check_model(req.model)
        return await complete(frontend, req, request, model)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request):
        check_model(req.model)
        return await complete(frontend, req, request, model)

    @app.post("/abort_request")
    async def abort_request(body: AbortRequest) -> dict:
        """Abort a running request by its response id (SGLang has the same endpoint): it ends with "abort"."""
        uids = frontend.uids_of(body.id)
        if not uids:
            raise APIError(404, f"no running request has the id {body.id!r}", param="id")
        frontend.check_alive()
        for uid in uids:  # each choice's stream ends with finish_reason "abort"
            frontend.workers.to_tokenizer.put(AbortMsg(uid))
        return {"aborted": body.id}

    # A test and debugging hook (SGLang has these routes): paused, the scheduler queues requests, answers aborts and
    # /health, and launches no batch; ?steps=n runs n more, then pauses. Each answers once that is in effect.
    @app.post("/pause_generation")
    async def pause_generation() -> dict:
        return await frontend.status(60.0, hold=True, steps=0)

    @app.post("/continue_generation")
    async def continue_generation(steps: int | None = Query(None, ge=1)) -> dict:
        return await frontend.status(60.0, hold=True, steps=steps)

    @app.get("/", response_class=HTMLResponse)
    async def chat_page() -> str:
        return CHAT_PAGE.read_text().replace("{{MODEL}}", model)

    return app


def startup_line(args: ServerArgs, workers: Workers) -> str:
    """What a user needs to know once the server listens: where, the chat page, and the limits it runs with."""
    url = f"http://{args.host}:{args.port}"
    pages = workers.total_slots // workers.page_size
    return (f"serving {args.served_model_name} on {url} (chat page {url}/; Ctrl-C stops): KV pool "
            f"{workers.total_slots} tokens ({pages} pages of {workers.page_size}), max_seq_len {workers.max_seq_len}, "
            f"up to {workers.max_running_reqs} running requests")


def run_api_server(args: ServerArgs) -> int:
    """Start the workers, serve until Ctrl-C/SIGTERM or a worker's death, and stop everything. The exit code is
    1 when a worker died."""
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, ending every open request first when it shuts down: left to itself, it would wait for
        the open streams to end and then cut them without a last event."""

        async def shutdown(self, sockets=None) -> None:
            frontend.close()
            await super().shutdown(sockets)

    def interrupt(*_) -> None:
        raise KeyboardInterrupt

    # SIGTERM while the workers start stops them as Ctrl-C does (the `with` below stops what has started).
    signal.signal(signal.SIGTERM, interrupt)
    print(f"starting the workers for {args.model_path} ...", flush=True)
    try:
        with Workers(args.model_path, args.engine_args, args.scheduler_args) as workers:
            # This process binds the port and hands the socket to uvicorn: with --port 0 the system picks a free
            # one, and no other process can take it between the choice and the listening.
            try:
                sock = socket.create_server((args.host, args.port), family=socket.AF_INET6 if ":" in args.host
                                            else socket.AF_INET)
            except OSError as e:
                print(f"error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", flush=True)
                return 1
            args = dataclasses.replace(args, port=sock.getsockname()[1])  # the port chosen, for the start-up line
            server: Server | None = None

            def on_dead(reason: str) -> None:
                print(f"error: {reason}; stopping the server", flush=True)
                server.should_exit = True

            frontend = Frontend(workers, on_dead, Metrics(args.served_model_name), args.log_requests,
                                args.stream_interval)
            app = create_app(frontend, args, workers.max_seq_len, workers.page_size)
            config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3)
            server = Server(config)
            # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again once it has put these
            # handlers back: they only note it, so the run ends here and leaving the `with` stops the workers.
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: None)
            try:
                server.run(sockets=[sock])
            finally:
                frontend.stop()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the workers started: they are stopped
        print("stopped while starting", flush=True)
        return 0
    print("stopped", flush=True)
    return 1 if frontend.dead is not None else 0
