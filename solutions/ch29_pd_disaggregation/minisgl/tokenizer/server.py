"""The tokenizer/detokenizer process: text in from the front end, token ids out to the scheduler; token ids in
from the scheduler, text out to the front end.

It is the only process that holds the tokenizer, so it also owns what is decided on text: stop strings and extra
stop tokens (the scheduler only knows EOS and max_tokens). When a stream ends on one of those before the scheduler
finished the request, the worker tells the scheduler to abort it: the tokens already on their way are ignored.

Chapter 24: it also turns the token ids of log-probabilities into the texts the OpenAI API shows, and keeps a
request's stop strings and stop tokens from ending it before its min_tokens. Chapter 25: a grammar that does not
compile is refused here, with a 400 naming the field, before the scheduler sees the request.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable

import torch

from minisgl.message.frontend import TokenLogprob
from minisgl.message import (AbortBackendMsg, AbortMsg, BaseBackendMsg, BaseFrontendMsg, BaseTokenizerMsg,
                             BatchBackendMsg, BatchFrontendMsg, BatchTokenizerMsg, DetokenizeMsg, ErrorMsg,
                             ErrorReply, MessageError, StatusMsg, StatusReply, TokenizeMsg, UserMsg, UserReply,
                             batched, pack_replies, unwrap)
from minisgl.tokenizer.detokenize import DetokenizeManager
from minisgl.tokenizer.tokenize import TokenizeManager
from minisgl.utils.mp import ZmqPullQueue, ZmqPushQueue
from minisgl.utils.process import report_death


class TokenizerWorker:
    """The logic of the tokenizer process, without the sockets: `handle` turns the messages it received into the
    messages for the scheduler (`to_backend`) and for the front end (`to_frontend`)."""

    def __init__(self, tokenizer, max_seq_len: int, vocab_size: int | None = None) -> None:
        self.max_seq_len = max_seq_len  # prompt + output tokens of one request, as the engine allows
        # room for one output token; token ids bounded by the model's vocabulary (the tokenizer's may be smaller)
        self.tokenize_manager = TokenizeManager(tokenizer, max_prompt_len=max_seq_len - 1, vocab_size=vocab_size)
        self.detokenize_manager = DetokenizeManager(tokenizer)
        self.usage: dict[int, list[int]] = {}  # uid -> [prompt tokens, completion tokens], while it streams
        self.intervals: dict[int, int] = {}  # uid -> its stream interval (TokenizeMsg.stream_interval), while it streams
        self.held: dict[int, tuple[str, list | None]] = {}  # uid -> (text, logprobs) not sent yet (its interval)
        self.tokenizer = tokenizer
        self._token_texts: dict[int, str] = {}  # token id -> its text alone, for log-probabilities
        self._grammars = None  # chapter 25: a GrammarCache, made on the first request with a grammar
        self.to_backend: list[BaseBackendMsg] = []
        self.to_frontend: list[BaseFrontendMsg] = []

    def handle(self, msgs: Iterable[BaseTokenizerMsg]) -> None:
        """Act on each message in order. A message this process does not handle is reported, and the others go on.
        The tokens of a step are detokenized together: the windows they decode are decoded ahead in one batch."""
        msgs = list(msgs)
        self.detokenize_manager.prefetch([pair for m in msgs if isinstance(m, DetokenizeMsg)
                                          for pair in zip(m.uids, m.tokens)])
        for msg in msgs:
            try:
                self._handle(msg)
            except MessageError as e:
                print(f"tokenizer: {e}", file=sys.stderr)

    def _handle(self, msg: BaseTokenizerMsg) -> None:
        if isinstance(msg, TokenizeMsg):
            self.tokenize(msg)
        elif isinstance(msg, DetokenizeMsg):
            rows = dict(zip(msg.logprob_rows, range(len(msg.logprob_rows))))  # chapter 24: token -> its entry
            for i, (uid, token, reason) in enumerate(msg.rows()):
                k = rows.get(i) if rows else None
                self.detokenize(uid, token, reason, None if k is None else
                                (msg.logprobs[k], msg.top_ids[k], msg.top_logprobs[k]))
        elif isinstance(msg, AbortMsg):
            self.abort(msg.uid)
        elif isinstance(msg, ErrorMsg):  # the scheduler refused it: the stream never starts
            self._drop(msg.uid)
            self.held.pop(msg.uid, None)
            self.to_frontend.append(ErrorReply(msg.uid, msg.message))
        elif isinstance(msg, StatusMsg):
            self.to_frontend.append(StatusReply(msg.uid, msg.status))
        else:
            raise MessageError(f"the tokenizer process does not handle {type(msg).__name__}")

    def tokenize(self, msg: TokenizeMsg) -> None:
        """A new request: its prompt becomes token ids for the scheduler, and its stream is opened for the replies.
        A prompt that cannot run is answered at once with an ErrorReply (the scheduler never sees it)."""
        try:
            ids = self.tokenize_manager.tokenize(msg.text)
        except ValueError as e:
            self.to_frontend.append(ErrorReply(msg.uid, str(e)))
            return
        params = msg.sampling_params
        vocab = self.tokenize_manager.vocab_size
        bad = [t for t in params.logit_bias if t >= vocab]
        if bad:  # the engine would refuse it too, naming the prompt: here the reply names the field
            self.to_frontend.append(ErrorReply(msg.uid, f"logit_bias token id {bad[0]} is outside the vocabulary "
                                                        f"[0, {vocab})", param="logit_bias"))
            return
        if params.grammar is not None and not self._grammar_compiles(msg.uid, *params.grammar):
            return
        if msg.auto_max_tokens:
            params.max_tokens = self.max_seq_len - len(ids)
        self.open_stream(msg.uid, len(ids), msg.stop, msg.stop_token_ids, msg.stream_interval, params.min_tokens)
        self.to_backend.append(UserMsg(msg.uid, torch.tensor(ids, dtype=torch.int32), params, msg.bootstrap_room))

    def _grammar_compiles(self, uid: int, kind: str, text: str) -> bool:
        """Chapter 25: compile the request's grammar (cached); False, with the ErrorReply sent, if it does not."""
        from minisgl.constrained.grammar import GrammarCache, GrammarSpec

        if self._grammars is None:
            self._grammars = GrammarCache(self.tokenizer, self.tokenize_manager.vocab_size)
        try:
            self._grammars.compile(GrammarSpec(kind, text))
        except ValueError as e:
            param = "response_format" if kind == "json_schema" else kind
            self.to_frontend.append(ErrorReply(uid, str(e), param=param))
            return False
        return True

    def open_stream(self, uid: int, prompt_tokens: int, stop: list[str] = (), stop_token_ids: list[int] = (),
                    stream_interval: int = 1, min_tokens: int = 0) -> None:
        """Get ready for the request's tokens: its detokenizer (with its stops, which count from its min_tokens-th
        token on), its usage counters and how often it gets a reply."""
        self.detokenize_manager.add(uid, stop, stop_token_ids, min_tokens=min_tokens)
        self.usage[uid] = [prompt_tokens, 0]
        if stream_interval != 1:
            self.intervals[uid] = stream_interval

    def reply(self, reply: UserReply) -> None:
        """Send a request's new text to the front end, or hold it for the next reply. With a stream interval of n,
        the front end gets the first token's reply (its time to first token), then one every n tokens with the text
        of all of them, and the last; 0 sends the first and the last only (a request that is not streamed)."""
        uid, n = reply.uid, self.intervals.get(reply.uid, 1)
        if uid in self.held:
            text, logprobs = self.held.pop(uid)
            reply.incremental_output = text + reply.incremental_output
            if logprobs is not None:
                reply.logprobs = logprobs + (reply.logprobs or [])
        count = reply.completion_tokens
        if n == 1 or reply.finished or count <= 1 or (n > 1 and (count - 1) % n == 0):
            self.to_frontend.append(reply)
        else:
            self.held[uid] = (reply.incremental_output, reply.logprobs)
        if reply.finished:
            self.intervals.pop(uid, None)

    def detokenize(self, uid: int, token: int, finish_reason: str | None,
                   logprobs: tuple[float, list[int], list[float]] | None = None) -> None:
        """One generated token of request `uid`: the new text goes to the front end. `finish_reason` is the
        scheduler's when this token ended the request (None while it runs); `logprobs` (chapter 24) the token's
        log-probability and its top ids and log-probabilities, if the request asked. A stream that ended on a stop
        string or stop token while the scheduler still runs the request makes the scheduler abort it."""
        if uid not in self.detokenize_manager.streams:
            return
        usage = self.usage[uid]
        usage[1] += 1
        result = self.detokenize_manager.detokenize(uid, token, finish_reason is not None)
        reason = None
        if result.finished:
            reason = "stop" if result.matched_stop is not None else finish_reason
            if finish_reason is None:
                self.to_backend.append(AbortBackendMsg(uid))
            del self.usage[uid]
        reply = UserReply(uid, result.text, result.finished, reason, *usage)
        if logprobs is not None:
            reply.logprobs = [self.token_logprob(token, *logprobs)]
        self.reply(reply)

    def token_logprob(self, token: int, logprob: float, top_ids: list[int], top_logprobs: list[float]) -> TokenLogprob:
        """Chapter 24: a token's log-probabilities with texts for its ids."""
        return TokenLogprob(self.token_text(token), logprob, [self.token_text(t) for t in top_ids], list(top_logprobs))

    def token_text(self, token_id: int) -> str:
        """A token's text on its own (special tokens by their names), decoded once per id."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return text

    def abort(self, uid: int) -> None:
        """The client is gone or asked to stop: the scheduler drops the request and the front end gets the last
        text with finish_reason "abort". A request that already ended is left alone."""
        stream = self.detokenize_manager.streams.get(uid)
        if stream is None:
            return
        text = stream.finish()
        usage = self._drop(uid)
        self.to_backend.append(AbortBackendMsg(uid))
        self.reply(UserReply(uid, text, True, "abort", *usage))

    def _drop(self, uid: int) -> list[int]:
        """Forget an open stream; its held text, if any, is left for the reply that ends it (self.reply)."""
        self.detokenize_manager.streams.pop(uid, None)
        self.intervals.pop(uid, None)
        return self.usage.pop(uid, [0, 0])

    def take_outputs(self) -> tuple[list[BaseBackendMsg], list[BaseFrontendMsg]]:
        out = self.to_backend, self.to_frontend
        self.to_backend, self.to_frontend = [], []
        return out


def tokenize_worker(model_path: str, max_seq_len: int, vocab_size: int, addr: str, backend_addr: str,
                    frontend_addr: str, ready=None) -> None:
    """The process: receive, handle, send, until the parent goes away (or SIGTERM). Ctrl-C is the parent's to
    handle: it stops the workers itself, so they never die half-way through a message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from transformers import AutoTokenizer

    parent = os.getppid()
    with report_death("tokenizer", ready):
        recv = ZmqPullQueue(addr, create=True, decoder=BaseTokenizerMsg.decoder)
        send_backend = ZmqPushQueue(backend_addr, create=False, encoder=BaseBackendMsg.encoder)
        send_frontend = ZmqPushQueue(frontend_addr, create=False, encoder=BaseFrontendMsg.encoder)
        worker = TokenizerWorker(AutoTokenizer.from_pretrained(model_path), max_seq_len, vocab_size)
        if ready is not None:
            ready.put({"worker": "tokenizer"})
        while os.getppid() == parent:
            msgs = []
            while (msg := _get(recv, timeout=0.5 if not msgs else 0)) is not None:
                msgs.extend(unwrap(msg))
            worker.handle(msgs)
            to_backend, to_frontend = worker.take_outputs()
            if to_backend:
                send_backend.put(batched(to_backend, BatchBackendMsg))
            if to_frontend:  # the step's replies as one UserReplyBatch
                send_frontend.put(batched(pack_replies(to_frontend), BatchFrontendMsg))


def _get(queue: ZmqPullQueue, timeout: float):
    """The next frame's message, None if none came in time; a frame that does not decode is reported and skipped."""
    try:
        return queue.get(timeout=timeout)
    except MessageError as e:
        print(f"tokenizer: dropped a bad frame: {e}", file=sys.stderr)
        return BatchTokenizerMsg([])
