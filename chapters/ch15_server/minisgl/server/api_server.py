"""The HTTP front end: an OpenAI-compatible API over the worker processes (FastAPI + uvicorn).

Each request gets a uid and a queue. A TokenizeMsg starts it in the tokenizer process; a thread receives the
replies (UserReply pieces, ErrorReply, StatusReply) and hands each to its request's queue on the event loop. A
streamed request sends every piece as a server-sent event; the others wait for the end. A client that goes away
(or an /abort_request) aborts its request, and a worker that dies makes every request answer 503 and the server
exit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse

from minisgl.message import AbortMsg, ErrorReply, GetStatusMsg, MessageError, StatusReply, UserReply, unwrap
from minisgl.server.args import ServerArgs
from minisgl.server.launch import Workers
from minisgl.server.protocol import APIError, ChatCompletionRequest, CompletionRequest, to_tokenize_msg

DISCONNECT_POLL_S = 0.25  # how often a waiting request checks that its client is still there
CHAT_PAGE = Path(__file__).with_name("chat.html")


class WorkerGone:
    """Put in every waiting queue when a worker dies."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class Frontend:
    """The front end's side of the workers: uids, one queue per request, and the thread that fills them."""

    def __init__(self, workers: Workers, on_dead=lambda reason: None) -> None:
        self.workers = workers
        self.on_dead = on_dead
        self.queues: dict[int, asyncio.Queue] = {}
        self.uids = itertools.count()
        self.dead: str | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._thread = threading.Thread(target=self._receive, name="minisgl-replies", daemon=True)
        self._thread.start()

    def stop(self) -> None:
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
                self.loop.call_soon_threadsafe(self._dispatch, unwrap(msg))
            elif (reason := self.workers.dead_worker()) is not None:
                self.loop.call_soon_threadsafe(self._fail_all, reason)
                return

    def _dispatch(self, replies: list) -> None:
        for reply in replies:
            queue = self.queues.get(reply.uid)
            if queue is not None:  # else: its client left, and the abort's reply came back
                queue.put_nowait(reply)

    def _fail_all(self, reason: str) -> None:
        self.dead = reason
        for queue in self.queues.values():
            queue.put_nowait(WorkerGone(reason))
        self.on_dead(reason)

    def check_alive(self) -> None:
        if self.dead is not None:
            raise APIError(503, f"the server is shutting down: {self.dead}", type="service_unavailable")

    def submit(self, req: CompletionRequest | ChatCompletionRequest) -> tuple[int, asyncio.Queue]:
        """Start a request: its uid and the queue its replies arrive in (APIError if it is refused here)."""
        self.check_alive()
        uid = next(self.uids)
        msg = to_tokenize_msg(uid, req)
        queue = self.queues[uid] = asyncio.Queue()
        self.workers.to_tokenizer.put(msg)
        return uid, queue

    def abort(self, uid: int) -> None:
        if self.queues.pop(uid, None) is not None and self.dead is None:
            self.workers.to_tokenizer.put(AbortMsg(uid))

    def finish(self, uid: int) -> None:
        self.queues.pop(uid, None)

    async def status(self, timeout: float = 10.0) -> dict:
        self.check_alive()
        uid = next(self.uids)
        queue = self.queues[uid] = asyncio.Queue()
        try:
            self.workers.to_scheduler.put(GetStatusMsg(uid))
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
        try:
            return await asyncio.wait_for(queue.get(), DISCONNECT_POLL_S)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                return None


def raise_for(reply: ErrorReply | WorkerGone) -> None:
    if isinstance(reply, WorkerGone):
        raise APIError(503, f"the server is shutting down: {reply.reason}", type="service_unavailable")
    raise APIError(400, reply.message, param="prompt")


class Completion:
    """How one endpoint's responses look: plain completions or chat (object names, where the text goes)."""

    def __init__(self, chat: bool, model: str, uid: int) -> None:
        self.chat, self.model = chat, model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uid}"
        self.created = int(time.time())

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
    uid, queue = frontend.submit(req)
    shape = Completion(isinstance(req, ChatCompletionRequest), model, uid)
    # TODO(ch15): wait for the first reply (next_reply; None: the client left, abort and return). An ErrorReply
    #   or WorkerGone raises (raise_for) before any response starts. Without streaming, collect the pieces until
    #   a finished reply and answer shape.full(text, last reply). With streaming, return a StreamingResponse
    #   (media type text/event-stream) of events(...). Whatever happens, the request's queue is given back
    #   (frontend.finish), and a request that did not finish is aborted (frontend.abort).
    raise NotImplementedError("TODO(ch15): complete")


async def events(frontend: Frontend, uid: int, queue: asyncio.Queue, reply: UserReply, shape: Completion,
                 request: Request, req: CompletionRequest | ChatCompletionRequest) -> AsyncIterator[str]:
    """The server-sent events of a streamed request, starting from its first reply."""
    # TODO(ch15): one chunk per reply, also when its text is empty (held back: a client still sees the token's
    #   time), the chat's first chunk also carrying the assistant role;
    #   the finish_reason goes in a last chunk of its own; with stream_options.include_usage, a chunk with empty
    #   choices and the usage follows; then "data: [DONE]". A WorkerGone becomes an error event and the stream
    #   ends. If the stream ends early (the client left: next_reply gives None, or the generator is closed),
    #   the request is aborted; otherwise its queue is given back.
    raise NotImplementedError("TODO(ch15): events")
    yield  # never reached: it keeps this function a generator, as the solution is


def create_app(frontend: Frontend, args: ServerArgs, max_model_len: int) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        frontend.start(asyncio.get_running_loop())  # replies reach the queues from the server's own loop
        print(f"serving {args.served_model_name} on http://{args.host}:{args.port} (Ctrl-C stops)", flush=True)
        yield

    app = FastAPI(title="mini-sglang", docs_url=None, redoc_url=None, lifespan=lifespan)
    model = args.served_model_name

    @app.exception_handler(APIError)
    async def api_error(_: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(Exception)
    async def internal_error(_: Request, e: Exception) -> JSONResponse:
        """A bug, not a bad request: the client gets a 500 that names it, and the server goes on serving."""
        error = APIError(500, f"internal error: {type(e).__name__}: {e}", type="internal_server_error")
        return JSONResponse(error.body(), status_code=500)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, e: RequestValidationError) -> JSONResponse:
        err = e.errors()[0]
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        where = ".".join(loc)
        if err.get("type") == "json_invalid":
            return JSONResponse(APIError(400, f"the body is not valid JSON: {err.get('msg')}").body(), 400)
        if err.get("type") == "extra_forbidden":
            message = f"unsupported parameter: {where}"
        else:
            message = f"{where or 'body'}: {err.get('msg')}"
        return JSONResponse(APIError(400, message, param=loc[0] if loc else None).body(), status_code=400)

    @app.middleware("http")
    async def check_api_key(request: Request, call_next):
        if args.api_key and request.url.path.startswith("/v1"):
            if request.headers.get("authorization") != f"Bearer {args.api_key}":
                body = APIError(401, "invalid or missing API key", code="invalid_api_key").body()
                return JSONResponse(body, status_code=401)
        return await call_next(request)

    def check_model(name: str | None) -> None:
        if name is not None and name != model:
            raise APIError(404, f"the model {name!r} does not exist; this server has {model!r}", param="model",
                           code="model_not_found")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", **(await frontend.status())}

    @app.get("/v1/models")
    async def models() -> dict:
        card = {"id": model, "object": "model", "created": 0, "owned_by": "minisgl", "max_model_len": max_model_len}
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        check_model(req.model)
        return await complete(frontend, req, request, model)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request):
        check_model(req.model)
        return await complete(frontend, req, request, model)

    @app.post("/abort_request")
    async def abort_request(request: Request) -> dict:
        """Abort a running request by its response id (SGLang has the same endpoint): it ends with "abort"."""
        body = await request.json()
        rid = body.get("id") if isinstance(body, dict) else None
        uid = int(rid.rsplit("-", 1)[1]) if isinstance(rid, str) and rid.rsplit("-", 1)[-1].isdigit() else None
        if uid is None or uid not in frontend.queues:
            raise APIError(404, f"no running request has the id {rid!r}", param="id")
        frontend.check_alive()
        frontend.workers.to_tokenizer.put(AbortMsg(uid))  # its stream ends with finish_reason "abort"
        return {"aborted": rid}

    @app.get("/", response_class=HTMLResponse)
    async def chat_page() -> str:
        return CHAT_PAGE.read_text().replace("{{MODEL}}", model)

    return app


def run_api_server(args: ServerArgs) -> int:
    """Start the workers, serve until Ctrl-C/SIGTERM or a worker's death, and stop everything. The exit code is
    1 when a worker died."""
    import uvicorn

    print(f"starting the workers for {args.model_path} ...", flush=True)
    with Workers(args.model_path, args.engine_args, args.scheduler_args) as workers:
        # This process binds the port and hands the socket to uvicorn: with --port 0 the system picks a free one,
        # and no other process can take it between the choice and the listening.
        try:
            sock = socket.create_server((args.host, args.port), family=socket.AF_INET6 if ":" in args.host
                                        else socket.AF_INET)
        except OSError as e:
            print(f"error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", flush=True)
            return 1
        args = dataclasses.replace(args, port=sock.getsockname()[1])  # the port chosen, for the "serving" line
        server: uvicorn.Server | None = None

        def on_dead(reason: str) -> None:
            print(f"error: {reason}; stopping the server", flush=True)
            server.should_exit = True

        frontend = Frontend(workers, on_dead)
        app = create_app(frontend, args, workers.max_seq_len)
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3)
        server = uvicorn.Server(config)
        # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again: let it end the run here,
        # so that leaving the `with` stops the workers (no process is left behind).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            pass
        finally:
            frontend.stop()
        print("stopped", flush=True)
        return 1 if frontend.dead is not None else 0
