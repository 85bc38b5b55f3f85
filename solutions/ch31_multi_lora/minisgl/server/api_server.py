"""The HTTP front end: an OpenAI-compatible API over the worker processes (FastAPI + uvicorn).

This module holds the routes, the API key and the start-up; the rest of the server has a module each:
frontend.py (the workers' side: uids, queues, the reply thread), serving.py with serving_completions.py and
serving_chat.py (one request to an endpoint, answered whole or streamed), protocol.py (the request bodies),
errors.py (OpenAI-style error bodies), metrics.py (/metrics), native.py (chapter 27: SGLang's /server_info and
/model_info, which sglang-router asks). A client that goes away (or an /abort_request) aborts
its request. A worker that dies makes every request answer 503 and the server exit; a shutdown (Ctrl-C, SIGTERM)
ends every open stream with an error event first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import signal
import socket
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict

from minisgl.server.args import ServerArgs
from minisgl.server.errors import APIError, add_error_handlers
from minisgl.server.frontend import Frontend, lora_adapter
from minisgl.server.launch import Workers
from minisgl.server.metrics import Metrics
from minisgl.server.native import ROUTER_NO_MODEL, add_native_routes
from minisgl.server.protocol import AbortRequest, ChatCompletionRequest, CompletionRequest
from minisgl.server.serving_chat import OpenAIServingChat
from minisgl.server.serving_completions import OpenAIServingCompletion

CHAT_PAGE = Path(__file__).with_name("chat.html")


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
                refused = APIError(401, "invalid or missing API key", code="invalid_api_key")
                await refused.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


class LoraAdapterRequest(BaseModel):
    """Chapter 31: the body of POST /load_lora_adapter and /unload_lora_adapter (SGLang's and vLLM's field names)."""

    model_config = ConfigDict(extra="forbid")
    lora_name: str
    lora_path: str | None = None


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
    add_error_handlers(app)

    adapters = lora_adapters(args)  # chapter 31: adapter name -> folder

    def check_model(name: str | None, request: bool = False) -> str | None:
        """The LoRA adapter a request's `model` names (chapter 31), None for the base model; an APIError else."""
        if request and name == ROUTER_NO_MODEL:  # chapter 27: sglang-router's "the client named no model"
            return None
        if name is None or name == model:
            return None
        if adapters is not None:
            adapter = name.removeprefix(f"{model}:")  # SGLang's "base:adapter"; vLLM's bare "adapter"
            if adapter in adapters:
                return adapter
            raise APIError(400, f"the model {name!r} is neither {model!r} nor a loaded LoRA adapter "
                           f"({', '.join(sorted(adapters)) or 'none loaded'}; name one as 'adapter' or "
                           f"'{model}:adapter')", param="model", code="model_not_found")
        raise APIError(404, f"the model {name!r} does not exist; this server has {model!r}", param="model",
                       code="model_not_found")

    card = {"id": model, "object": "model", "created": 0, "owned_by": "minisgl", "max_model_len": max_model_len}
    # vLLM lists each adapter as a model of its own, with the base model as its parent and its folder as its root.
    cards = {name: dict(card, id=name, root=path, parent=model) for name, path in (adapters or {}).items()}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", **(await frontend.status())}

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus' text format (see metrics.py)."""
        status = await frontend.status()
        return Response(frontend.metrics.render(status, page_size), media_type=Metrics.CONTENT_TYPE)

    add_native_routes(app, args, frontend)  # chapter 27

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [card, *cards.values()]}

    @app.get("/v1/models/{name:path}")
    async def model_card(name: str) -> dict:
        adapter = check_model(name)
        return card if adapter is None else cards[adapter]

    async def load_lora_adapter(body: LoraAdapterRequest) -> dict:
        """Chapter 31: load an adapter while serving; a 400 naming the field when it cannot be loaded."""
        if adapters is None:
            raise APIError(400, "LoRA is off: start the server with --enable-lora", param="lora_name")
        if not body.lora_path:
            raise APIError(400, "lora_path is required to load an adapter", param="lora_path")
        await lora_adapter(frontend, body.lora_name, body.lora_path)
        adapters[body.lora_name] = body.lora_path
        cards[body.lora_name] = dict(card, id=body.lora_name, root=body.lora_path, parent=model)
        return {"loaded": body.lora_name}

    async def unload_lora_adapter(body: LoraAdapterRequest) -> dict:
        """Chapter 31: unload an adapter; refused (400) while a waiting or running request uses it."""
        if adapters is None:
            raise APIError(400, "LoRA is off: start the server with --enable-lora", param="lora_name")
        await lora_adapter(frontend, body.lora_name, None)
        adapters.pop(body.lora_name, None)
        cards.pop(body.lora_name, None)
        return {"unloaded": body.lora_name}

    for prefix in ("", "/v1"):  # SGLang's routes, and vLLM's under /v1
        app.post(f"{prefix}/load_lora_adapter")(load_lora_adapter)
        app.post(f"{prefix}/unload_lora_adapter")(unload_lora_adapter)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        lora = check_model(req.model, request=True)
        serving = OpenAIServingCompletion(frontend, model, req)
        serving.lora_name = lora
        return await serving.handle(request)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request):
        lora = check_model(req.model, request=True)
        serving = OpenAIServingChat(frontend, model, req)
        serving.lora_name = lora
        return await serving.handle(request)

    @app.post("/abort_request")
    async def abort_request(body: AbortRequest) -> dict:
        """Abort a running request by its response id (SGLang has the same endpoint): it ends with "abort"."""
        uids = frontend.uids_of(body.id)
        if not uids:
            raise APIError(404, f"no running request has the id {body.id!r}", param="id")
        frontend.check_alive()
        for uid in uids:  # its stream ends with finish_reason "abort"
            frontend.send_abort(uid)
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


def lora_adapters(args: ServerArgs) -> dict[str, str] | None:
    """Chapter 31: the adapters the server loads at start (name -> folder); None when LoRA is off."""
    if not args.engine_args.get("enable_lora"):
        return None
    return dict(args.engine_args.get("lora_paths") or {})


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
