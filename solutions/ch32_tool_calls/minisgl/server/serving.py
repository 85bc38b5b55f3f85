"""One request to an OpenAI endpoint, from its parsed body to its response: what both endpoints share.

An OpenAIServing object serves one request: it gets a random response id, starts the request in the workers
(Frontend.submit), waits for its first reply, and answers one JSON body or a stream of server-sent events (`data:
{chunk}` lines, then `data: [DONE]`). A client that goes away aborts its request. How the endpoint's objects look
(their names, where the text goes) is a subclass's: OpenAIServingCompletion (serving_completions.py) and
OpenAIServingChat (serving_chat.py), as SGLang and vLLM split them.

Chapter 24: a request with n > 1 is n requests of the engine (choices 0 to n-1, seeds seed, seed + 1, ...) that
share one queue. Choice 0 goes first; the others are sent when its first token arrives, by which time its prompt
is in the prefix cache, so they compute none of it again. Each chunk names its choice by `index`, and the usage
counts the prompt once and the tokens of every choice. Log-probabilities take the endpoint's shape (`logprobs`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from minisgl.message import ErrorReply, TokenizeMsg, UserReply
from minisgl.message.frontend import TokenLogprob
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
    return APIError(400, reply.message, param=reply.param)


def usage_of(*replies: UserReply) -> dict:
    """Usage of a request: its prompt once, the tokens of every choice."""
    prompt, completion = replies[0].prompt_tokens, sum(r.completion_tokens for r in replies)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class OpenAIServing(ABC):
    """One request to one endpoint. A subclass names the endpoint's objects and shapes its choices."""

    id_prefix: str  # of the response id: "cmpl", "chatcmpl"
    object: str  # the whole answer's "object"
    chunk_object: str  # a streamed chunk's "object"

    def __init__(self, frontend: Frontend, model: str, req: CompletionRequest | ChatCompletionRequest) -> None:
        self.frontend, self.model, self.req = frontend, model, req
        self.lora_name: str | None = None  # chapter 31: the adapter the `model` field selected (None: the base)
        # As OpenAI's ids look: a prefix and a random part, so that nobody can guess another client's id (POST
        # /abort_request takes it).
        self.id = f"{self.id_prefix}-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self._templates: dict[int, tuple[str, str, str]] = {}  # choice -> (before, after, empty event)

    @abstractmethod
    def full(self, texts: list[str], replies: list[UserReply], logprobs: list[list[TokenLogprob] | None]) -> dict:
        """The whole answer: each choice's text, last reply (its finish reason and token counts) and
        log-probabilities (None where not asked), in choice order."""

    @abstractmethod
    def chunk(self, text: str | None, finish_reason: str | None, first: bool = False, index: int = 0,
              logprobs: list[TokenLogprob] | None = None) -> dict:
        """A streamed chunk of choice `index`: some text (None: none) and its tokens' log-probabilities, or the
        finish reason; `first`: the choice's first chunk."""

    @abstractmethod
    def logprobs(self, entries: list[TokenLogprob] | None, index: int = 0) -> dict | None:
        """The `logprobs` of a choice (or of a chunk of it), in the endpoint's shape; None when not asked."""

    def body(self, obj: str, choices: list, usage: dict | None = None) -> dict:
        """The fields every answer and chunk has, around its choices."""
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if usage is not None:
            out["usage"] = usage
        return out

    def usage_chunk(self, *replies: UserReply) -> dict:
        return self.body(self.chunk_object, [], usage_of(*replies))

    def text_event(self, text: str, index: int = 0) -> str:
        """The server-sent event of a chunk with this text (not the first of its choice), byte for byte
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

    def tokenize_msg(self, uid: int) -> TokenizeMsg:
        """The request's TokenizeMsg (an APIError naming a bad field); the chat endpoint adds its plan (chapter 32)."""
        return to_tokenize_msg(uid, self.req)

    def submit(self, msg: TokenizeMsg, choice: int, queue: asyncio.Queue) -> int:
        """Start choice `choice` of the request (msg: choice 0's message) as a request of its own: one sample, seed
        + choice, and a uid of its own but choice 0's; its replies arrive in `queue`. Its uid."""
        params = msg.sampling_params
        seed = None if params.seed is None else params.seed + choice
        uid = msg.uid if choice == 0 else self.frontend.new_uid()
        msg = dataclasses.replace(msg, uid=uid, sampling_params=dataclasses.replace(params, n=1, seed=seed))
        self.frontend.submit(msg, self.id, queue, self.req.stream)
        return uid

    async def handle(self, request: Request) -> JSONResponse | StreamingResponse:
        """Run the request to the end (one JSON body) or stream it (server-sent events, then `data: [DONE]`). With
        n > 1 the other choices start once choice 0's first reply is in: they find its prompt cached."""
        queue = asyncio.Queue()
        msg = self.tokenize_msg(self.frontend.new_uid())
        if self.lora_name is not None:  # chapter 31
            msg = dataclasses.replace(msg, sampling_params=dataclasses.replace(msg.sampling_params,
                                                                               lora_name=self.lora_name))
        uids = [self.submit(msg, 0, queue)]
        finished = False
        try:
            reply = await next_reply(queue, request)
            if reply is None:
                return JSONResponse({}, status_code=499)  # nobody reads it: the client closed the connection
            if not isinstance(reply, UserReply):
                raise error_of(reply)
            uids += [self.submit(msg, choice, queue) for choice in range(1, self.req.n)]
            if self.req.stream:
                finished = True  # from here on the event stream owns the request
                return StreamingResponse(self.events(uids, queue, reply, request), media_type="text/event-stream")
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
                    raise error_of(reply)
            finished = True
            return JSONResponse(self.full([texts[u] for u in uids], [last[u] for u in uids],
                                          [logprobs[u] for u in uids]))
        finally:
            for u in uids:
                if not finished:
                    self.frontend.abort(u)
                elif not self.req.stream:
                    self.frontend.finish(u)

    async def events(self, uid: int | list[int], queue: asyncio.Queue, reply: UserReply, request: Request,
                     ) -> AsyncIterator[str]:
        """The server-sent events of a streamed request, starting from its first reply. `uid` is the request's, or
        the list of its choices' (each chunk names its choice by `index`, and the usage chunk and `[DONE]` follow
        the last choice's end)."""
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
                        out.append(sse(self.chunk(reply.incremental_output, None, first=reply.uid not in started,
                                                  index=i, logprobs=reply.logprobs)))
                        started.add(reply.uid)
                    else:
                        out.append(self.text_event(reply.incremental_output, i))
                    if reply.finished:
                        last[reply.uid] = reply
                        out.append(sse(self.chunk(None, reply.finish_reason, index=i)))
                        if len(last) < len(uids):
                            continue
                        if self.req.stream_options is not None and self.req.stream_options.include_usage:
                            out.append(sse(self.usage_chunk(*(last[u] for u in uids))))
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
                    self.frontend.finish(u)
                else:
                    self.frontend.abort(u)
