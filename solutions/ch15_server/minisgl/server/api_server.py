"""The HTTP front end: an OpenAI-compatible API over the worker processes (FastAPI + uvicorn).

Each request gets a uid (for the messages) and a random response id (for the client), and a queue. A TokenizeMsg
starts it in the tokenizer process; a thread receives the replies (UserReply pieces, ErrorReply, StatusReply) and
hands each to its request's queue on the event loop, timing the request on the way (/metrics). A streamed request
sends every piece as a server-sent event; the others wait for the end. A client that goes away (or an
/abort_request) aborts its request. A worker that dies makes every request answer 503 and the server exit; a
shutdown (Ctrl-C, SIGTERM) ends every open stream with an error event first.
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
        self.ids: dict[str, int] = {}  # response id -> uid, while the request runs
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
        uid = next(self.uids)
        msg = to_tokenize_msg(uid, req)
        # A stream gets a reply every stream_interval tokens; an answer sent whole needs only its first token's (the
        # request runs: TTFT) and its last.
        msg.stream_interval = self.stream_interval if req.stream else 0
        queue = self.queues[uid] = asyncio.Queue()
        self.ids[rid], self.rids[uid] = uid, rid
        self.times[uid] = RequestTimes(rid)
        self.workers.to_tokenizer.put(msg)
        return uid, queue

    def uid_of(self, rid: str) -> int | None:
        """The uid of the running request with this response id."""
        return self.ids.get(rid)

    def abort(self, uid: int) -> None:
        if self.queues.pop(uid, None) is not None and self.dead is None:
            self.workers.to_tokenizer.put(AbortMsg(uid))
        self._forget(uid)

    def finish(self, uid: int) -> None:
        self.queues.pop(uid, None)
        self._forget(uid)

    def _forget(self, uid: int) -> None:
        self.ids.pop(self.rids.pop(uid, ""), None)

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
    return APIError(400, reply.message, param="prompt")


def raise_for(reply: ErrorReply | WorkerGone) -> None:
    raise error_of(reply)


class Completion:
    """How one endpoint's responses look: plain completions or chat (object names, where the text goes)."""

    def __init__(self, chat: bool, model: str, rid: str | None = None) -> None:
        self.chat, self.model = chat, model
        self.id = rid or new_request_id(chat)
        self.created = int(time.time())
        self._text_event = self._empty_event = None

    def text_event(self, text: str) -> str:
        """The server-sent event of a chunk with this text (not the first of a chat), byte for byte
        sse(self.chunk(text, None)), from a template made once per request: only the text is encoded each time."""
        if self._text_event is None:
            mark = "\x00text\x00"
            before, after = sse(self.chunk(mark, None)).split(json.dumps(mark, ensure_ascii=False))
            self._text_event = (before, after)
            self._empty_event = sse(self.chunk("", None))
        if not text:
            return self._empty_event
        before, after = self._text_event
        return before + json.dumps(text, ensure_ascii=False) + after

    def _object(self, obj: str, choices: list, usage: dict | None = None) -> dict:
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if usage is not None:
            out["usage"] = usage
        return out

    def full(self, text: str, reply: UserReply) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": reply.finish_reason}
            return self._object("chat.completion", [choice], usage_of(reply))
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reply.finish_reason}
        return self._object("text_completion", [choice], usage_of(reply))

    def chunk(self, text: str | None, finish_reason: str | None, first: bool = False) -> dict:
        if self.chat:
            delta = ({"role": "assistant", "content": ""} if first else {}) | ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return self._object("chat.completion.chunk", [choice])
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        return self._object("text_completion", [choice])

    def usage_chunk(self, reply: UserReply) -> dict:
        return self._object("chat.completion.chunk" if self.chat else "text_completion", [], usage_of(reply))


def usage_of(reply: UserReply) -> dict:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens}


def sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


async def complete(frontend: Frontend, req: CompletionRequest | ChatCompletionRequest, request: Request,
                   model: str) -> JSONResponse | StreamingResponse:
    """Run one request to the end (one JSON body) or stream it (server-sent events, then `data: [DONE]`)."""
    shape = Completion(isinstance(req, ChatCompletionRequest), model)
    uid, queue = frontend.submit(req, shape.id)
    # TODO(ch15): wait for the first reply (next_reply; None: the client left, abort and return). An ErrorReply
    #   or WorkerGone raises (raise_for) before any response starts. Without streaming, collect the pieces until
    #   a finished reply and answer shape.full(text, last reply). With streaming, return a StreamingResponse
    #   (media type text/event-stream) of events(...). Whatever happens, the request's queue is given back
    #   (frontend.finish), and a request that did not finish is aborted (frontend.abort).
    # >>> solution
    finished = False
    try:
        reply = await next_reply(queue, request)
        if reply is None:
            return JSONResponse({}, status_code=499)  # nobody reads it: the client closed the connection
        if not isinstance(reply, UserReply):
            raise_for(reply)
        if req.stream:
            finished = True  # from here on the event stream owns the request
            return StreamingResponse(events(frontend, uid, queue, reply, shape, request, req),
                                     media_type="text/event-stream")
        text = reply.incremental_output
        while not reply.finished:
            reply = await next_reply(queue, request)
            if reply is None:
                return JSONResponse({}, status_code=499)
            if not isinstance(reply, UserReply):
                raise_for(reply)
            text += reply.incremental_output
        finished = True
        return JSONResponse(shape.full(text, reply))
    finally:
        if not finished:
            frontend.abort(uid)
        elif not req.stream:
            frontend.finish(uid)
    # <<< solution


async def events(frontend: Frontend, uid: int, queue: asyncio.Queue, reply: UserReply, shape: Completion,
                 request: Request, req: CompletionRequest | ChatCompletionRequest) -> AsyncIterator[str]:
    """The server-sent events of a streamed request, starting from its first reply."""
    # TODO(ch15): one chunk per reply, also when its text is empty (held back: a client still sees the token's
    #   time), the chat's first chunk also carrying the assistant role; every reply there is at once
    #   (next_replies) goes out in one write, still one event each (shape.text_event);
    #   the finish_reason goes in a last chunk of its own; with stream_options.include_usage, a chunk with empty
    #   choices and the usage follows; then "data: [DONE]". A WorkerGone becomes an error event (the body of
    #   error_of, as a request that had not started would get it) and "data: [DONE]". If the stream ends early
    #   (the client left: next_replies gives None, or the generator is closed, or a WorkerGone came), the request
    #   is aborted; otherwise its queue is given back.
    # >>> solution
    done = False
    try:
        replies = [reply]
        first = True
        while True:
            out = []
            for reply in replies:
                if not isinstance(reply, UserReply):
                    out += [sse(error_of(reply).body()), sse("[DONE]")]
                    yield "".join(out)
                    return
                out.append(sse(shape.chunk(reply.incremental_output, None, first=True)) if first
                           else shape.text_event(reply.incremental_output))
                first = False
                if reply.finished:
                    out.append(sse(shape.chunk(None, reply.finish_reason)))
                    if req.stream_options is not None and req.stream_options.include_usage:
                        out.append(sse(shape.usage_chunk(reply)))
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
        if done:
            frontend.finish(uid)
        else:
            frontend.abort(uid)
    # <<< solution


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
        uid = frontend.uid_of(body.id)
        if uid is None:
            raise APIError(404, f"no running request has the id {body.id!r}", param="id")
        frontend.check_alive()
        frontend.workers.to_tokenizer.put(AbortMsg(uid))  # its stream ends with finish_reason "abort"
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
