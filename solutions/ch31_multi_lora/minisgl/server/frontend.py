"""The front end's side of the workers: requests out to the tokenizer process, replies back to their requests.

Each request gets a uid (it names the request in the messages) and a queue. A TokenizeMsg starts it in the tokenizer
process; the requests started in one turn of the event loop go out together, in one frame, so a burst of requests
reaches the scheduler as one batch, as it would offline. A thread receives the replies (UserReply pieces, ErrorReply,
StatusReply; one frame per scheduler step) and hands them to the event loop, one wake-up per frame, which puts each in
its request's queue, timing the request on the way (/metrics). A worker that dies, or a shutdown, puts a
WorkerGone in every waiting queue. next_reply and next_replies wait on a queue and notice a client that has left.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import threading
import time

from fastapi import Request

from minisgl.message import (AbortMsg, BatchTokenizerMsg, ErrorReply, GetStatusMsg, HoldMsg, MessageError,
                             StatusReply, TokenizeMsg, UserReply, batched, unwrap)
from minisgl.message.backend import LoraAdapterMsg
from minisgl.server.errors import APIError, unavailable
from minisgl.server.launch import Workers
from minisgl.server.metrics import Metrics, RequestTimes, request_line

DISCONNECT_POLL_S = 0.25  # how often a waiting request checks that its client is still there


class WorkerGone:
    """Put in every waiting queue when a worker dies, or when the server shuts down."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


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
        # response id -> the uids it runs as (one; from chapter 24, one per choice), and back, while they run
        self.ids: dict[str, list[int]] = {}
        self.rids: dict[int, str] = {}
        self.times: dict[int, RequestTimes] = {}  # uid -> its times, until its last reply
        self.uids = itertools.count()
        self.dead: str | None = None  # why a worker died
        self.closing: str | None = None  # why the server stops (a shutdown)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._outbox: list = []  # messages for the tokenizer process, sent at the end of this turn of the loop

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
            raise unavailable(self.closing if self.dead is None else f"the server is shutting down: {self.dead}")

    def new_uid(self) -> int:
        return next(self.uids)

    def submit(self, msg: TokenizeMsg, rid: str, queue: asyncio.Queue, stream: bool) -> None:
        """Start a request (uid msg.uid, from new_uid) under the response id `rid`: its replies arrive in `queue`.
        A 503 once the server stops."""
        self.check_alive()
        # A stream gets a reply every stream_interval tokens; an answer sent whole needs only its first token's (the
        # request runs: TTFT) and its last.
        msg.stream_interval = self.stream_interval if stream else 0
        self.queues[msg.uid] = queue
        self.ids.setdefault(rid, []).append(msg.uid)
        self.rids[msg.uid] = rid
        self.times[msg.uid] = RequestTimes(rid)
        self._outbox.append(msg)
        if len(self._outbox) == 1:  # the first of this turn: send them all once the loop has run what is ready
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no event loop runs (a script, a test): at once
                self.flush()

    def flush(self) -> None:
        """Send what waits for the tokenizer process, in one frame."""
        if self._outbox:
            msgs, self._outbox = self._outbox, []
            self.workers.to_tokenizer.put(batched(msgs, BatchTokenizerMsg))

    def send_abort(self, uid: int) -> None:
        """Abort a request in the tokenizer process, behind whatever waits to be sent (its TokenizeMsg, perhaps)."""
        self._outbox.append(AbortMsg(uid))
        self.flush()

    def uids_of(self, rid: str) -> list[int]:
        """The uids of the running request with this response id (none once it has ended)."""
        return list(self.ids.get(rid, []))

    def abort(self, uid: int) -> None:
        if self.queues.pop(uid, None) is not None and self.dead is None:
            self.send_abort(uid)
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
        uid = self.new_uid()
        queue = self.queues[uid] = asyncio.Queue()
        try:
            self.workers.to_scheduler.put(HoldMsg(uid, steps) if hold else GetStatusMsg(uid))
            reply = await asyncio.wait_for(queue.get(), timeout)
        except asyncio.TimeoutError:
            raise unavailable(f"the scheduler did not answer in {timeout:.0f} s") from None
        finally:
            self.queues.pop(uid, None)
        if isinstance(reply, WorkerGone):
            raise unavailable(reply.reason)
        assert isinstance(reply, StatusReply)
        return reply.status


async def lora_adapter(frontend: Frontend, name: str, path: str | None, timeout: float = 60.0) -> None:
    """Chapter 31: have the scheduler load (path given) or unload (None) an adapter; an APIError (400) naming
    lora_name or lora_path when it refuses, 503 when it does not answer."""
    frontend.check_alive()
    uid = frontend.new_uid()
    queue = frontend.queues[uid] = asyncio.Queue()
    try:
        frontend.workers.to_scheduler.put(LoraAdapterMsg(uid, name, path))
        reply = await asyncio.wait_for(queue.get(), timeout)
    except asyncio.TimeoutError:
        raise unavailable(f"the scheduler did not answer in {timeout:.0f} s") from None
    finally:
        frontend.queues.pop(uid, None)
    if isinstance(reply, WorkerGone):
        raise unavailable(reply.reason)
    if isinstance(reply, ErrorReply):
        raise APIError(400, reply.message, param="lora_path" if "lora_path" in reply.message else "lora_name")


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
