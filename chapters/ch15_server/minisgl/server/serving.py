"""One request to an OpenAI endpoint, from its parsed body to its response: what both endpoints share.

An OpenAIServing object serves one request: it gets a random response id, starts the request in the workers
(Frontend.submit), waits for its first reply, and answers one JSON body or a stream of server-sent events (`data:
{chunk}` lines, then `data: [DONE]`). A client that goes away aborts its request. How the endpoint's objects look
(their names, where the text goes) is a subclass's: OpenAIServingCompletion (serving_completions.py) and
OpenAIServingChat (serving_chat.py), as SGLang and vLLM split them.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from minisgl.message import ErrorReply, UserReply
from minisgl.server.errors import APIError, unavailable
from minisgl.server.frontend import Frontend, WorkerGone, next_replies, next_reply
from minisgl.server.protocol import ChatCompletionRequest, CompletionRequest, to_tokenize_msg


def sse(data: dict | str) -> str:
    """One server-sent event."""
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


def error_of(reply: ErrorReply | WorkerGone) -> APIError:
    """The error a reply that is not text stands for: a refused prompt is a 400, a dead worker or a shutdown a 503.
    A request that has not answered yet gets it as its response, a stream as its last event."""
    if isinstance(reply, WorkerGone):
        return unavailable(reply.reason)
    return APIError(400, reply.message, param="prompt")


def usage_of(reply: UserReply) -> dict:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens}


class OpenAIServing(ABC):
    """One request to one endpoint. A subclass names the endpoint's objects and shapes its choices."""

    id_prefix: str  # of the response id: "cmpl", "chatcmpl"
    object: str  # the whole answer's "object"
    chunk_object: str  # a streamed chunk's "object"

    def __init__(self, frontend: Frontend, model: str, req: CompletionRequest | ChatCompletionRequest) -> None:
        self.frontend, self.model, self.req = frontend, model, req
        # As OpenAI's ids look: a prefix and a random part, so that nobody can guess another client's id (POST
        # /abort_request takes it).
        self.id = f"{self.id_prefix}-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self._text_event = self._empty_event = None

    @abstractmethod
    def full(self, text: str, reply: UserReply) -> dict:
        """The whole answer: the text and the last reply (its finish reason and token counts)."""

    @abstractmethod
    def chunk(self, text: str | None, finish_reason: str | None, first: bool = False) -> dict:
        """A streamed chunk: some text (None: none), or the finish reason; `first`: the stream's first chunk."""

    def body(self, obj: str, choices: list, usage: dict | None = None) -> dict:
        """The fields every answer and chunk has, around its choices."""
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if usage is not None:
            out["usage"] = usage
        return out

    def usage_chunk(self, reply: UserReply) -> dict:
        return self.body(self.chunk_object, [], usage_of(reply))

    def text_event(self, text: str) -> str:
        """The server-sent event of a chunk with this text (not the first), byte for byte sse(self.chunk(text,
        None)), from a template made once per request: only the text is encoded each time."""
        if self._text_event is None:
            mark = "\x00text\x00"
            before, after = sse(self.chunk(mark, None)).split(json.dumps(mark, ensure_ascii=False))
            self._text_event = (before, after)
            self._empty_event = sse(self.chunk("", None))
        if not text:
            return self._empty_event
        before, after = self._text_event
        return before + json.dumps(text, ensure_ascii=False) + after

    async def handle(self, request: Request) -> JSONResponse | StreamingResponse:
        """Run the request to the end (one JSON body) or stream it (server-sent events, then `data: [DONE]`)."""
        uid, queue = self.frontend.new_uid(), asyncio.Queue()
        self.frontend.submit(to_tokenize_msg(uid, self.req), self.id, queue, self.req.stream)
        # TODO(ch15): wait for the first reply (next_reply; None: the client left, abort and return). An ErrorReply
        #   or WorkerGone raises (error_of) before any response starts. Without streaming, collect the pieces until
        #   a finished reply and answer self.full(text, last reply). With streaming, return a StreamingResponse
        #   (media type text/event-stream) of self.events(...). Whatever happens, the request's queue is given back
        #   (frontend.finish), and a request that did not finish is aborted (frontend.abort).
        raise NotImplementedError("TODO(ch15): OpenAIServing.handle")

    async def events(self, uid: int, queue: asyncio.Queue, reply: UserReply, request: Request) -> AsyncIterator[str]:
        """The server-sent events of a streamed request, starting from its first reply."""
        # TODO(ch15): one chunk per reply, also when its text is empty (held back: a client still sees the token's
        #   time), the first chunk made with first=True (a chat's also carries the assistant role); every reply
        #   there is at once (next_replies) goes out in one write, still one event each (self.text_event);
        #   the finish_reason goes in a last chunk of its own; with stream_options.include_usage, a chunk with empty
        #   choices and the usage follows; then "data: [DONE]". A WorkerGone becomes an error event (the body of
        #   error_of, as a request that had not started would get it) and "data: [DONE]". If the stream ends early
        #   (the client left: next_replies gives None, or the generator is closed, or a WorkerGone came), the request
        #   is aborted; otherwise its queue is given back.
        raise NotImplementedError("TODO(ch15): OpenAIServing.events")
        yield  # never reached: it keeps this function a generator, as the solution is
