"""Chapter 14: the scheduler and the tokenizer as processes that talk in messages.

In-process tests drive SchedulerIO and TokenizerWorker directly (deterministic aborts: waiting, mid-chunk,
decoding, with overlap on and off); process tests start the real workers and talk to them over ZMQ."""

from __future__ import annotations

import os
import time

import msgpack
import pytest
import torch
import zmq

from helpers import TEXTS, TokenRow, assert_clean, hf_greedy, model_path, prompt_ids, token_rows, tokenizer
from minisgl.core import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.message import (AbortBackendMsg, AbortMsg, BatchBackendMsg, BatchFrontendMsg, DetokenizeMsg, ErrorMsg, ErrorReply,
                             ExitMsg, GetStatusMsg, HoldMsg, StatusMsg, StatusReply, TokenizeMsg, UserMsg, UserReply,
                             unwrap)
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.io import SchedulerIO
from minisgl.scheduler.prefill import ChunkedReq
from minisgl.scheduler.scheduler import Scheduler
from minisgl.scheduler.utils import PendingReq
from minisgl.server.launch import Workers
from minisgl.tokenizer.server import TokenizerWorker

IO_STUBS = ("SchedulerIO.process_msg", "SchedulerIO.send_results", "SchedulerIO.run_forever")
WORKER_STUBS = ("TokenizerWorker.tokenize", "TokenizerWorker.detokenize", "TokenizerWorker.abort")


class Inbox:
    """The scheduler's receiving queue, in-process: messages the test queued, handed out one per get(). Empty, it
    answers None at once where a real queue would block; a loop that keeps asking it while its scheduler has
    nothing to do is a loop that does not end, and fails here in milliseconds instead of hanging the test."""

    IDLE_POLLS = 100  # a loop that ends asks an idle, empty queue twice or so

    def __init__(self) -> None:
        self.items: list = []
        self.scheduler: Scheduler | None = None  # set by make_io
        self._idle_polls, self._exit_sent = 0, False

    def get(self, timeout=None):
        if self.items:
            self._idle_polls = 0
            msg = self.items.pop(0)
            self._exit_sent |= isinstance(msg, ExitMsg)
            return msg
        if self.scheduler is not None and self.scheduler.idle:
            self._idle_polls += 1
            if self._idle_polls > self.IDLE_POLLS:
                raise AssertionError(
                    f"run_forever asked an empty queue for messages {self.IDLE_POLLS} times in a row while nothing "
                    "waits or runs" + (" after an ExitMsg (it ends the loop at once)" if self._exit_sent else
                                       ": it must return when a blocking receive gets nothing and alive() is false"))
        return None


class Outbox:
    """The scheduler's sending queue, in-process: every message it sent, batches flattened."""

    def __init__(self) -> None:
        self.sent: list = []

    def put(self, msg) -> None:
        self.sent.extend(getattr(msg, "data", [msg]))


def make_io(name="tiny-qwen3", overlap=True, max_extend_tokens=64, **config) -> SchedulerIO:
    config = dict(max_running_reqs=4, max_seq_len=256, cpu_kv_cache_mb=16) | config
    scheduler = Scheduler(Engine(EngineConfig(model_path(name), **config)),
                          SchedulerConfig(max_extend_tokens=max_extend_tokens, overlap=overlap))
    inbox = Inbox()
    inbox.scheduler = scheduler
    return SchedulerIO(scheduler, inbox, Outbox())


def user_msg(uid: int, ids: list[int], max_tokens: int, ignore_eos=True) -> UserMsg:
    return UserMsg(uid, torch.tensor(ids, dtype=torch.int32), SamplingParams(max_tokens=max_tokens,
                                                                              ignore_eos=ignore_eos))


def tokens_by_uid(sent: list) -> dict[int, list[TokenRow]]:
    out: dict[int, list[TokenRow]] = {}
    for row in token_rows(sent):
        out.setdefault(row.uid, []).append(row)
    return out


def run_until_idle(io: SchedulerIO) -> None:
    io.run_forever(alive=lambda: False)  # returns once nothing waits or runs and no message is queued


def assert_all_free(io: SchedulerIO) -> None:
    assert_clean(io.scheduler)
    cache = io.scheduler.cache_manager
    assert cache.available_size == cache.num_slots, \
        f"{cache.num_slots - cache.available_size} KV slots are still held by nobody's request"


@pytest.mark.stubs(*IO_STUBS)
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])
def test_messages_in_tokens_out_equal_hf_greedy(overlap):
    io = make_io(overlap=overlap, max_extend_tokens=16)
    prompts = prompt_ids("tiny-qwen3", 3)
    io.recv.items += [user_msg(uid, ids, 6 + uid) for uid, ids in enumerate(prompts)]
    run_until_idle(io)
    got = tokens_by_uid(io.send.sent)
    for uid, ids in enumerate(prompts):
        want = hf_greedy("tiny-qwen3", ids, 6 + uid)
        msgs = got.get(uid, [])
        assert [m.next_token for m in msgs] == want, f"request {uid}: tokens sent {[m.next_token for m in msgs]}, HF {want}"
        assert [m.finished for m in msgs] == [False] * (len(want) - 1) + [True], \
            f"request {uid}: only its last token is marked finished, got {[m.finished for m in msgs]}"
        assert msgs[-1].finish_reason == "length", f"max_tokens ended it: reason {msgs[-1].finish_reason!r}"
    assert not io.scheduler.finished, "finished requests are sent, not kept: scheduler.finished must be empty"
    steps = [m for m in io.send.sent if isinstance(m, DetokenizeMsg)]
    assert len(steps) <= len(io.scheduler.history), \
        f"a step's tokens travel in one DetokenizeMsg: {len(steps)} messages for {len(io.scheduler.history)} batches"
    assert_all_free(io)


def step_by_hand(io: SchedulerIO) -> None:
    """The serving loop without run_forever: step until idle, sending each step's results."""
    last = None
    while True:
        last = io.scheduler.overlap_step(last)
        io.send_results()
        if last is None and io.scheduler.idle:
            return


@pytest.mark.stubs("SchedulerIO.send_results")
def test_a_step_is_one_message_and_a_finish_reason_marks_the_requests_last_token():
    """A step in which a request got several tokens (chapter 26's speculative decoding does that): the step is one
    DetokenizeMsg in the order the tokens were recorded, and the reason of the request that finished sits at its last
    token, not its first. The state is built through the scheduler's own hooks: on_token and its finished requests."""
    from types import SimpleNamespace

    io = make_io()
    done, running = SimpleNamespace(uid=7, finish_reason="length"), SimpleNamespace(uid=8, finish_reason=None)
    for req, token in [(done, 11), (running, 21), (done, 12), (done, 13), (running, 22)]:
        io.scheduler.on_token(req, token)
    io.scheduler.finished[done.uid] = done
    io.send_results()
    msgs = [m for m in io.send.sent if isinstance(m, DetokenizeMsg)]
    assert len(msgs) == 1, f"one DetokenizeMsg for the step, got {len(msgs)}: {msgs}"
    got = (msgs[0].uids, msgs[0].tokens, msgs[0].finish_reasons)
    assert got == ([7, 8, 7, 7, 8], [11, 21, 12, 13, 22], ["", "", "", "length", ""]), \
        f"(uids, tokens, finish_reasons) sent {got}; request 7 finished with its last token, 13"
    assert not io.scheduler.finished, "the finished request is taken, not kept"
    io.send_results()
    assert len([m for m in io.send.sent if isinstance(m, DetokenizeMsg)]) == 1, "a step is sent once, then forgotten"


@pytest.mark.stubs("SchedulerIO.send_results")
def test_each_token_is_sent_with_its_finish_reason():
    io = make_io("smollm2", max_seq_len=128)
    ids = prompt_ids("smollm2", 1)[0]
    want = hf_greedy("smollm2", ids, 60, stop_at_eos=True)
    assert len(want) < 60, "the fixture's chat answer ends with EOS before 60 tokens"
    for uid, (max_tokens, ignore_eos) in enumerate([(60, False), (3, False), (len(want) + 2, True)]):
        io.scheduler.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32),
                                            SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)))
    step_by_hand(io)
    got = tokens_by_uid(io.send.sent)
    assert [m.next_token for m in got[0]] == want, "the EOS-ended answer equals HF greedy, EOS included"
    reasons = [got[uid][-1].finish_reason for uid in range(3)]
    assert reasons == ["stop", "length", "length"], \
        f"EOS -> stop, max_tokens -> length, an ignored EOS is no stop: got {reasons}"
    assert all(not m.finished and m.finish_reason is None for uid in range(3) for m in got[uid][:-1]), \
        "only the last token of a request is marked finished (and has a reason)"
    assert not io.scheduler.finished, "finished requests are sent, not kept: scheduler.finished must be empty"
    assert_all_free(io)


@pytest.mark.stubs("SchedulerIO.process_msg")
def test_messages_queue_refuse_report_and_exit():
    io = make_io(max_seq_len=64)
    ids = prompt_ids("tiny-qwen3", 1)[0]
    batch = BatchBackendMsg([user_msg(0, ids, 4), user_msg(1, ids, 64), BatchBackendMsg([user_msg(2, ids, 5)])])
    io.recv.items += [batch, GetStatusMsg(9), AbortBackendMsg(2), AbortBackendMsg(77)]
    for msg in io.receive_msgs(blocking=False):  # the batch arrives unwrapped, in order
        io.process_msg(msg)
    waiting = [p.uid for p in io.scheduler.prefill_manager.pending]
    assert waiting == [0], f"request 0 waits (1 is too long, 2 was aborted), the queue holds {waiting}"
    errors = [m for m in io.outbox if isinstance(m, ErrorMsg)]
    assert [e.uid for e in errors] == [1] and "max_seq_len" in errors[0].message, \
        f"a request over the context is refused with an ErrorMsg naming the limit, got {errors}"
    status = [m for m in io.outbox if isinstance(m, StatusMsg)]
    assert len(status) == 1 and status[0].uid == 9 and status[0].status["waiting"] == 2 and \
        status[0].status["total_slots"] == io.scheduler.cache_manager.num_slots, f"status: {status}"
    io.process_msg(ExitMsg())
    assert not io.running, "ExitMsg ends the loop"
    io.scheduler.abort_all()
    assert_all_free(io)


def abort_when(io: SchedulerIO, uid: int, seen) -> list[int]:
    """Queue AbortBackendMsg(uid) right after the first batch for which seen(batch) holds; returns the step
    (index into scheduler.history) the abort was queued after."""
    at: list[int] = []

    def on_batch(batch):
        if not at and seen(batch):
            at.append(len(io.scheduler.history))
            io.recv.items.append(AbortBackendMsg(uid))

    io.scheduler.on_batch = on_batch
    return at


@pytest.mark.stubs(*IO_STUBS)
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])
@pytest.mark.parametrize("where", ["waiting", "mid-chunk", "decoding"])
def test_an_abort_frees_the_request_wherever_it_is(where, overlap):
    io = make_io(overlap=overlap, max_extend_tokens=8, max_running_reqs=2 if where == "waiting" else 4)
    prompts = prompt_ids("tiny-qwen3", 3)
    long_prompt = (prompts[0] * 6)[:40]  # five chunks of 8
    victim = {"waiting": user_msg(7, prompts[2], 8), "mid-chunk": user_msg(7, long_prompt, 8),
              "decoding": user_msg(7, prompts[2], 30)}[where]
    seen = {"waiting": lambda b: not b.is_prefill,  # the two others decode while 7 waits for a row
            "mid-chunk": lambda b: any(r.uid == 7 and isinstance(r, ChunkedReq) for r in b.reqs),
            "decoding": lambda b: not b.is_prefill and any(r.uid == 7 for r in b.reqs)}[where]
    at = abort_when(io, 7, seen)
    io.recv.items += [user_msg(0, prompts[0], 12), user_msg(1, prompts[1], 12), victim]
    run_until_idle(io)
    assert at, f"the test never saw request 7 {where}"
    got = tokens_by_uid(io.send.sent)
    for uid in (0, 1):
        want = hf_greedy("tiny-qwen3", prompts[uid], 12)
        assert [m.next_token for m in got[uid]] == want, f"request {uid} must finish unharmed by the abort"
    sent_7 = got.get(7, [])
    assert not any(m.finished for m in sent_7), "an aborted request never reports finished"
    ran = [i for i, (_, uids) in enumerate(io.scheduler.history) if 7 in uids]
    assert all(i <= at[0] for i in ran), f"request 7 ran in batches {ran} after its abort (queued after {at[0]})"
    if where == "waiting":
        assert not sent_7 and not ran, "a request aborted while waiting never runs"
    assert_all_free(io)


@pytest.mark.stubs(*IO_STUBS)
def test_exit_ends_the_loop_even_with_work_left():
    io = make_io()
    io.recv.items += [user_msg(0, prompt_ids("tiny-qwen3", 1)[0], 40), ExitMsg()]
    io.run_forever(alive=lambda: True)  # must return: the ExitMsg ends it
    assert not io.running, "ExitMsg ends the loop"
    io.scheduler.abort_all()
    assert_all_free(io)


class Script(Inbox):
    """An inbox that plays a script: messages; None, which ends a turn of the loop (it steps once); and checks,
    called when the loop asks for its next message (the last turn's results sent). It records every timeout asked."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list = []

    def get(self, timeout=None):
        while self.items and callable(self.items[0]):
            self.items.pop(0)()
        self.timeouts.append(timeout)
        return super().get(timeout)


def scripted_io(overlap: bool) -> SchedulerIO:
    io = make_io(overlap=overlap)
    io.recv = Script()
    io.recv.scheduler = io.scheduler
    return io


@pytest.mark.stubs(*IO_STUBS)
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])
def test_a_hold_launches_nothing_and_steps_one_batch_at_a_time(overlap):
    """HoldMsg, the test hook of the server's /pause_generation: held, requests queue and aborts and status queries
    are answered but no batch runs; steps=1 runs one batch, whose tokens are sent before the hold's answer (with
    overlap the batch in flight is finished first); None runs freely again. The answers stay HF greedy."""
    io = scripted_io(overlap)
    sched = io.scheduler
    prompts = prompt_ids("tiny-qwen3", 2)
    want = [hf_greedy("tiny-qwen3", ids, 6) for ids in prompts]

    def sent(kind, uid=None) -> list:
        return [m for m in io.send.sent if isinstance(m, kind) and uid in (None, getattr(m, "uid", None))]

    def held() -> None:
        assert not sched.history and not sent(DetokenizeMsg), f"held, yet batches ran: {sched.history}"
        replies = sent(StatusMsg, 10)
        assert len(replies) == 1 and replies[0].status["waiting"] == 2, f"the hold's answer: {replies}"
        assert all(t and t > 0 for t in io.recv.timeouts[-2:]), \
            f"a held loop waits on its socket rather than spinning: it asked with timeouts {io.recv.timeouts}"

    def one_step() -> None:
        assert len(sched.history) == 1, f"steps=1 ran batches {sched.history}"
        tokens = sorted((m.uid, m.next_token) for m in token_rows(sent(DetokenizeMsg)))
        assert tokens == [(0, want[0][0]), (1, want[1][0])], f"after one batch: tokens {tokens}"
        reply = sent(StatusMsg, 11)
        assert reply and io.send.sent.index(reply[0]) > max(map(io.send.sent.index, sent(DetokenizeMsg))), \
            "the hold answers after the batch's tokens are sent"
        assert reply[0].status["running"] == 2, f"both requests decode now: {reply[0].status}"

    def aborted_while_held() -> None:
        status = sent(StatusMsg, 12)[0].status
        assert (status["running"], status["waiting"], len(sched.history)) == (1, 0, 1), \
            f"the abort is acted on while held, and still nothing runs: {status}, batches {sched.history}"

    io.recv.items += [HoldMsg(10, 0), user_msg(0, prompts[0], 6), user_msg(1, prompts[1], 6), None, None, None,
                      held, HoldMsg(11, 1), None, None, None, one_step,
                      AbortBackendMsg(1), GetStatusMsg(12), None, None, aborted_while_held, HoldMsg(13, None)]
    io.run_forever(alive=lambda: bool(io.recv.items))  # ends once the script is played and nothing runs
    got = tokens_by_uid(io.send.sent)
    assert [m.next_token for m in got[0]] == want[0], f"request 0 after the hold: {[m.next_token for m in got[0]]}"
    assert [m.next_token for m in got[1]] == want[1][:1], "request 1 was aborted after its first token"
    assert sent(StatusMsg, 13), "a HoldMsg(None) is answered too"
    assert_all_free(io)


@pytest.mark.stubs(*IO_STUBS)
def test_a_held_loop_stops_when_its_parent_is_gone():
    """Held with a request waiting, nothing will let it go once the parent is gone: the loop ends (as an ExitMsg
    would end it) instead of waiting forever."""
    io = scripted_io(overlap=True)
    io.recv.items += [HoldMsg(1, 0), user_msg(0, prompt_ids("tiny-qwen3", 1)[0], 8), None]
    io.run_forever(alive=lambda: False)
    assert not io.running and not io.scheduler.history, "the held loop must end without running a batch"
    io.scheduler.abort_all()
    assert_all_free(io)


# ---- the tokenizer process's logic, in-process ----------------------------------------------------------------

def worker(max_seq_len=512) -> TokenizerWorker:
    return TokenizerWorker(tokenizer("smollm2"), max_seq_len)


def story_tokens() -> list[int]:
    """24 tokens of plain text (no special tokens): SmolLM2 continuing a story."""
    return hf_greedy("smollm2", tokenizer("smollm2").encode(TEXTS[2]), 24)


def feed(w: TokenizerWorker, uid: int, ids: list[int], last_reason="length") -> list[UserReply]:
    """Detokenize ids as the scheduler would send them; the replies to the front end."""
    for i, t in enumerate(ids):
        last = i == len(ids) - 1
        w.handle([DetokenizeMsg.one(uid, t, last_reason if last else None)])
    return [r for r in w.take_outputs()[1] if isinstance(r, UserReply)]


@pytest.mark.stubs("TokenizerWorker.tokenize")
def test_tokenize_sends_ids_or_refuses():
    tok = tokenizer("smollm2")
    w = worker(max_seq_len=64)
    chat = [{"role": "user", "content": "Hi there"}]
    w.handle([TokenizeMsg(0, "Hello world", SamplingParams(max_tokens=5)),
              TokenizeMsg(1, chat, SamplingParams(), auto_max_tokens=True),
              TokenizeMsg(2, [5, 6, 7], SamplingParams(max_tokens=2)),
              TokenizeMsg(3, "", SamplingParams()), TokenizeMsg(4, "word " * 80, SamplingParams()),
              TokenizeMsg(5, [10**9], SamplingParams())])
    to_backend, to_frontend = w.take_outputs()
    sent = {m.uid: m for m in to_backend}
    assert sorted(sent) == [0, 1, 2], f"three prompts can run, the scheduler got {sorted(sent)}"
    assert sent[0].input_ids.dtype == torch.int32 and sent[0].input_ids.tolist() == tok.encode("Hello world")
    chat_ids = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert sent[1].input_ids.tolist() == list(chat_ids), "chat messages go through the chat template"
    assert sent[1].sampling_params.max_tokens == 64 - len(chat_ids), \
        f"auto_max_tokens fills the room left: {sent[1].sampling_params.max_tokens} != {64 - len(chat_ids)}"
    assert sent[0].sampling_params.max_tokens == 5 and sent[2].input_ids.tolist() == [5, 6, 7]
    errors = {r.uid: r.message for r in to_frontend if isinstance(r, ErrorReply)}
    assert sorted(errors) == [3, 4, 5], f"empty, too long and out-of-vocabulary prompts are refused: {errors}"
    assert "empty" in errors[3], f"the empty prompt's error says so: {errors[3]!r}"
    assert "64" in errors[4] or "63" in errors[4], f"the too-long prompt's error names the limit: {errors[4]!r}"


@pytest.mark.stubs("TokenizerWorker.detokenize")
def test_detokenize_streams_text_usage_and_reasons():
    tok = tokenizer("smollm2")
    ids = story_tokens()
    w = worker()
    w.open_stream(0, prompt_tokens=5)
    replies = feed(w, 0, ids)
    assert "".join(r.incremental_output for r in replies) == tok.decode(ids, skip_special_tokens=True), \
        "the streamed pieces add up to the decode of every token"
    assert [r.finished for r in replies].count(True) == 1 and replies[-1].finished, "one finished reply, the last"
    last = replies[-1]
    assert (last.finish_reason, last.prompt_tokens, last.completion_tokens) == ("length", 5, len(ids)), \
        f"usage and reason of the last reply: {last}"
    assert feed(w, 0, [5]) == [], "a token after the stream ended is ignored (overlap sends one more)"


@pytest.mark.stubs("TokenizerWorker.detokenize")
@pytest.mark.parametrize("kind", ["string", "token"])
def test_a_stop_ends_the_text_and_aborts_the_scheduler_request(kind):
    tok = tokenizer("smollm2")
    ids = story_tokens()
    full = tok.decode(ids, skip_special_tokens=True)
    k = 12
    if kind == "string":
        stop = tok.decode(ids[k:k + 2])  # spans two tokens
        extra = dict(stop=[stop])
        want = full[:full.index(stop)]
    else:
        extra = dict(stop_token_ids=[ids[k]])
        want = tok.decode(ids[:k], skip_special_tokens=True)
    w = worker()
    w.open_stream(0, 5, **extra)
    replies, aborts = [], []
    for t in ids:
        w.handle([DetokenizeMsg.one(0, t)])
        to_backend, to_frontend = w.take_outputs()
        replies += to_frontend
        aborts += [m.uid for m in to_backend if isinstance(m, AbortBackendMsg)]
    text = "".join(r.incremental_output for r in replies)
    assert text == want, f"the text stops exactly before the {kind} stop:\n got {text!r}\nwant {want!r}"
    assert replies[-1].finished and replies[-1].finish_reason == "stop", f"last reply {replies[-1]}"
    assert aborts == [0], f"the scheduler is told once to drop the request, got aborts for {aborts}"


@pytest.mark.stubs("TokenizerWorker.detokenize", "TokenizerWorker.abort")
@pytest.mark.parametrize("interval", [1, 5, 0])
def test_a_stream_interval_holds_text_for_the_next_reply(interval):
    """TokenizeMsg.stream_interval: the first token's reply at once, then one every `interval` tokens carrying the
    text of all of them, and the last (0: the first and the last only); an abort sends what was held."""
    tok = tokenizer("smollm2")
    ids = story_tokens()
    w = worker()
    w.open_stream(0, prompt_tokens=5, stream_interval=interval)
    replies = feed(w, 0, ids)
    counts = [r.completion_tokens for r in replies]
    want = ({1: list(range(1, 25)), 5: [1, 6, 11, 16, 21, 24], 0: [1, 24]})[interval]
    assert counts == want, f"interval {interval}: replies after tokens {counts}, want {want}"
    assert "".join(r.incremental_output for r in replies) == tok.decode(ids, skip_special_tokens=True)
    assert replies[-1].finished and not w.held and not w.intervals, "nothing is kept for an ended stream"
    w.open_stream(1, prompt_tokens=5, stream_interval=interval)
    for t in ids[:8]:
        w.handle([DetokenizeMsg.one(1, t)])
    early = [r for r in w.take_outputs()[1] if isinstance(r, UserReply)]
    w.handle([AbortMsg(1)])
    last = [r for r in w.take_outputs()[1] if isinstance(r, UserReply)]
    text = "".join(r.incremental_output for r in early + last)
    assert last[-1].finish_reason == "abort" and text == tok.decode(ids[:8], skip_special_tokens=True), \
        f"interval {interval}: the abort must send the text held back, got {text!r}"
    assert not w.held and not w.intervals


@pytest.mark.stubs("TokenizerWorker.abort")
def test_abort_and_scheduler_errors():
    w = worker()
    w.open_stream(0, 3)
    w.open_stream(1, 2)
    w.handle([AbortMsg(0), ErrorMsg(1, "too long"), AbortMsg(0), AbortMsg(42)])
    to_backend, to_frontend = w.take_outputs()
    assert [type(m).__name__ for m in to_backend] == ["AbortBackendMsg"] and to_backend[0].uid == 0, \
        f"one abort reaches the scheduler (unknown and repeated aborts are ignored), got {to_backend}"
    replies = [(type(r).__name__, r.uid, getattr(r, "finish_reason", None)) for r in to_frontend]
    assert replies == [("UserReply", 0, "abort"), ("ErrorReply", 1, None)], f"replies {replies}"
    assert feed(w, 0, [5, 6]) == [] and feed(w, 1, [5]) == [], "no stream is left open for either"


# ---- the real processes --------------------------------------------------------------------------------------

def test_workers_refuse_scheduler_settings_that_are_not_a_scheduler_config_before_starting_anything():
    with pytest.raises(ValueError, match="scheduler_config must be a SchedulerConfig, got dict"):
        Workers(model_path("smollm2"), {}, {"max_extend_tokens": 32})


@pytest.fixture(scope="module")
def workers():
    engine = dict(max_running_reqs=8, max_seq_len=256, cpu_kv_cache_mb=32)
    with Workers(model_path("smollm2"), engine, SchedulerConfig(max_extend_tokens=32)) as w:
        yield w


def receive(w: Workers, until, timeout=60.0) -> list:
    """Replies from the workers until until(replies) holds; a dead worker raises with its last error, and
    `timeout` s without any reply fail (a stall, not a slow machine: replies keep coming while work goes on)."""
    replies: list = []
    deadline = time.monotonic() + timeout
    while not until(replies):
        msg = w.replies.get(timeout=0.2)
        if msg is not None:
            replies += unwrap(msg)
            deadline = time.monotonic() + timeout
        elif (dead := w.dead_worker()) is not None:
            raise RuntimeError(dead)
        elif time.monotonic() > deadline:
            raise AssertionError(f"no reply for {timeout:.0f} s and the answer is not complete; got {replies}")
    return replies


def finished(uids):
    return lambda rs: {r.uid for r in rs if getattr(r, "finished", True)} >= set(uids)


def status(w: Workers) -> dict:
    w.to_scheduler.put(GetStatusMsg(10**6))
    return [r for r in receive(w, lambda rs: any(isinstance(r, StatusReply) for r in rs))
            if isinstance(r, StatusReply)][0].status


def test_workers_report_their_limits_and_run_in_a_process_group_of_their_own(workers):
    """What the front end prints when it starts (max_seq_len, the KV pool, max running requests); and a signal
    to the front end's process group (Ctrl-C in a terminal, a supervisor's SIGTERM) must not reach the workers:
    the front end stops them in order, while a worker killed under it would look like a crash."""
    assert (workers.max_seq_len, workers.max_running_reqs, workers.page_size) == (256, 8, 1), \
        f"limits {workers.max_seq_len}, {workers.max_running_reqs}, {workers.page_size}"
    assert workers.total_slots % workers.page_size == 0 and workers.total_slots > 0, workers.total_slots
    alive = {name: p.pid for name, p in workers.processes.items() if p.is_alive()}
    assert "tokenizer" in alive, f"the tokenizer process runs: {workers.processes}"
    same = [name for name, pid in alive.items() if os.getpgid(pid) == os.getpgrp()]
    assert not same, f"{same} share the front end's process group: a signal to the group would kill them"


def ask(w: Workers, msg, replies: list) -> dict:
    """Send a GetStatusMsg or HoldMsg to the scheduler; the status it answers with. The replies that reach the front
    end before that answer are added to `replies`: the scheduler sends a step's tokens before it answers."""
    w.to_scheduler.put(msg)
    got = receive(w, lambda rs: any(isinstance(r, StatusReply) and r.uid == msg.uid for r in rs))
    replies += [r for r in got if not isinstance(r, StatusReply)]
    return next(r for r in got if isinstance(r, StatusReply) and r.uid == msg.uid).status


def until(w: Workers, replies: list, what: str, done, timeout: float = 60.0) -> dict:
    """The scheduler's status, asked again until done(status) holds (a message crossing two processes)."""
    deadline = time.monotonic() + timeout
    while not done(s := ask(w, GetStatusMsg(10**6 + 1), replies)):
        assert time.monotonic() < deadline, f"{what}: not after {timeout:.0f} s; status {s}"
        time.sleep(0.05)
    return s


@pytest.mark.stubs(*IO_STUBS, *WORKER_STUBS)
def test_processes_stream_hf_greedy_text_and_abort(workers):
    """Three requests and a long one (5), all held until they wait together (HoldMsg, the scheduler's test hook),
    then run one batch at a time until 5 has a token; aborted while held, it can finish no more: its stream ends
    with "abort" after the tokens it had, and the others' text equals HF greedy."""
    tok = tokenizer("smollm2")
    prompts = prompt_ids("smollm2", 3)
    replies: list = []
    ask(workers, HoldMsg(10**6 + 2, 0), replies)
    for uid, ids in enumerate(prompts):
        workers.to_tokenizer.put(TokenizeMsg(uid, ids, SamplingParams(max_tokens=16)))
    workers.to_tokenizer.put(TokenizeMsg(5, prompts[0], SamplingParams(max_tokens=200, ignore_eos=True)))
    until(workers, replies, "the four requests wait", lambda s: s["waiting"] == 4)
    while not any(r.uid == 5 for r in replies):
        held = ask(workers, HoldMsg(10**6 + 3, 1), replies)
    seen = sum(r.uid == 5 for r in replies)
    workers.to_tokenizer.put(AbortMsg(5))
    until(workers, replies, "the abort reaches the scheduler", lambda s: s["running"] + s["waiting"] ==
          held["running"] + held["waiting"] - 1)
    ask(workers, HoldMsg(10**6 + 4, None), replies)
    replies += receive(workers, lambda rs: finished([0, 1, 2, 5])(replies + rs))
    for uid, ids in enumerate(prompts):
        want = hf_greedy("smollm2", ids, 16, stop_at_eos=True)
        mine = [r for r in replies if r.uid == uid]
        text = "".join(r.incremental_output for r in mine)
        assert text == tok.decode(want, skip_special_tokens=True), f"request {uid}: {text!r}"
        assert mine[-1].completion_tokens == len(want) and mine[-1].prompt_tokens == len(ids), f"usage {mine[-1]}"
    mine = [r for r in replies if r.uid == 5]
    assert mine[-1].finish_reason == "abort" and mine[-1].completion_tokens == seen and len(mine) == seen + 1, \
        f"aborted after {seen} tokens, request 5 ended with {mine[-1]} after {len(mine)} replies"
    s = until(workers, replies, "the scheduler lets go of every request", lambda s: not s["running"] and
              not s["waiting"])
    assert s.get("integrity_checked") == 1 and s["available_slots"] == s["total_slots"], \
        f"after the abort every KV slot is free or cached again: {s}"


@pytest.mark.stubs(*IO_STUBS, *WORKER_STUBS)
def test_a_bad_frame_is_dropped_and_the_workers_go_on(workers):
    for addr in (workers.addrs.backend, workers.addrs.tokenizer):
        context = zmq.Context()
        sock = context.socket(zmq.PUSH)
        sock.connect(addr)
        sock.send(b"\xc1 not msgpack")
        sock.send(msgpack.packb({"__type__": "Nonsense", "__v__": 1}))
        sock.close(linger=1000)
        context.term()
    workers.to_tokenizer.put(TokenizeMsg(20, "Hello", SamplingParams(max_tokens=3)))
    replies = receive(workers, finished([20]))
    assert workers.dead_worker() is None, "a bad frame must not kill a worker"
    assert replies[-1].completion_tokens == 3, f"the next request is served: {replies[-1]}"


@pytest.mark.stubs("TokenizerWorker.tokenize")
def test_token_ids_are_bounded_by_the_models_vocabulary():
    """A model's embedding table may be larger than its tokenizer (or the tokenizer a stand-in): token-id prompts
    are checked against the model's vocabulary size, which the scheduler reports."""
    size = len(tokenizer("smollm2"))
    w = TokenizerWorker(tokenizer("smollm2"), 64, vocab_size=size + 8)
    w.handle([TokenizeMsg(0, [size + 7], SamplingParams()), TokenizeMsg(1, [size + 8], SamplingParams())])
    to_backend, to_frontend = w.take_outputs()
    assert [m.uid for m in to_backend] == [0], f"id {size + 7} is in the model's vocabulary: {to_backend}"
    assert [r.uid for r in to_frontend if isinstance(r, ErrorReply)] == [1], f"id {size + 8} is not: {to_frontend}"
