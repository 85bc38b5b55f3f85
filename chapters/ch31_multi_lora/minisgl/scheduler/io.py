"""The scheduler process: the scheduler's loop, fed by messages instead of a list of prompts.

Requests arrive as UserMsg (already tokenized) and leave as generated tokens, both over ZMQ to the tokenizer process:
one DetokenizeMsg per step carries every token of the step as arrays, so the scheduler's cost per token is two list
appends, and the work per token (text, stop strings, replies) is the tokenizer process's. The loop never waits
while there is work: it takes whatever messages are queued, runs one step (with overlap scheduling, launching the
next batch before the last one's tokens are read), and sends the new tokens. Only when nothing runs or waits does it block on the socket. A HoldMsg (a hook for tests) holds it: it
still takes messages but launches no batch, so a test can queue requests first and then let them run together.
A token of a request that asked for log-probabilities (chapter 24) carries its own and its top_logprobs in the
same message. One step may give a request several tokens (chapter 26's speculative decoding): in order, the last one
marked finished. With prefill/decode disaggregation (chapter 29) the scheduler is the prefill or the decode side of a
pair (minisgl/disagg): every request must then carry its bootstrap room, and a request the prefill side gave up ends
on the decode side with an error reply.
"""

from __future__ import annotations

import os
import signal
import sys

import torch

from minisgl.core import Batch, Req, TokenLogprob
from minisgl.message import (AbortBackendMsg, BaseBackendMsg, BaseTokenizerMsg, BatchTokenizerMsg, DetokenizeMsg,
                             ErrorMsg, ExitMsg, GetStatusMsg, HoldMsg, MessageError, StatusMsg, UserMsg, batched,
                             unwrap)
from minisgl.message.backend import LoraAdapterMsg
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.scheduler import ForwardData, Scheduler
from minisgl.scheduler.utils import PendingReq
from minisgl.utils.mp import ZmqPullQueue, ZmqPushQueue
from minisgl.utils.process import report_death

IDLE_POLL_S = 0.5  # how long an idle loop blocks on its socket before it checks that its parent still lives
HELD_POLL_S = 0.05  # how long a held loop waits for a message before it looks again (it runs nothing)


class SchedulerIO:
    """A Scheduler behind two queues: `recv` (messages for the scheduler) and `send` (to the tokenizer process)."""

    def __init__(self, scheduler: Scheduler, recv: ZmqPullQueue, send: ZmqPushQueue) -> None:
        self.scheduler = scheduler
        self.recv, self.send = recv, send
        self.outbox: list[BaseTokenizerMsg] = []
        # the tokens the last step recorded, to send: token i is request uids[i]'s
        self.uids: list[int] = []
        self.tokens: list[int] = []
        self.logprob_rows: list[int] = []  # chapter 24: the tokens that carry log-probabilities, and theirs
        self.logprobs: list[TokenLogprob] = []
        self.running = True  # an ExitMsg ends the loop
        scheduler.on_token = self._on_token
        # The hold (HoldMsg, a test and debugging hook) stands in front of the scheduler's choice of batch:
        # step() and overlap_step() launch nothing while it holds, and overlap_step still finishes the batch in flight.
        self.steps_left: int | None = None  # batches the scheduler may still launch; None: any number
        self._hold_replies: list[int] = []  # HoldMsgs to answer once their hold is in effect
        self._settled = True  # the last step launched nothing: nothing is in flight
        self._alive = lambda: True
        choose = scheduler.schedule_next_batch
        scheduler.schedule_next_batch = lambda: self._next_batch(choose)

    def receive_msgs(self, blocking: bool) -> list[BaseBackendMsg]:
        """Every message queued now; when `blocking`, wait up to IDLE_POLL_S for the first one (HELD_POLL_S while
        held). A frame that does not decode is reported and skipped. HoldMsgs are acted on here: the loop's
        own controls, they never reach process_msg."""
        self._answer_holds()
        msgs: list[BaseBackendMsg] = []
        timeout = IDLE_POLL_S if blocking else HELD_POLL_S if self.held else 0
        while True:
            try:
                msg = self.recv.get(timeout=timeout)
            except MessageError as e:
                print(f"scheduler: dropped a bad frame: {e}", file=sys.stderr)
                continue
            if msg is None:
                break
            for one in unwrap(msg):  # a batch (nested or not) is acted on message by message
                if isinstance(one, HoldMsg):
                    self._hold(one)
                else:
                    msgs.append(one)
            timeout = 0
        if self.held and not msgs and not self._alive():
            self.running = False  # held with nobody left to let it go: stop as an ExitMsg would
        return msgs

    @property
    def held(self) -> bool:
        """The hold is in effect: no batch may launch and none is in flight."""
        return self.steps_left == 0 and self._settled

    def _hold(self, msg: HoldMsg) -> None:
        if msg.steps is not None and msg.steps < 0:
            print(f"scheduler: dropped {msg}: steps must be >= 0 or None", file=sys.stderr)
            return
        self.steps_left = msg.steps
        self._hold_replies.append(msg.uid)

    def _next_batch(self, choose) -> Batch | None:
        """The scheduler's next batch, unless the hold forbids launching one."""
        batch = None if self.steps_left == 0 else choose()
        if batch is not None and self.steps_left is not None:
            self.steps_left -= 1
        self._settled = batch is None
        return batch

    def _answer_holds(self) -> None:
        """Answer the HoldMsgs whose hold is in effect: running freely, or the batches allowed have run (or none was
        left to run) and their tokens are sent."""
        if self._hold_replies and (self.steps_left is None or self._settled):
            self.send.put(batched([StatusMsg(uid, self.status()) for uid in self._hold_replies], BatchTokenizerMsg))
            self._hold_replies = []

    def _on_token(self, req: Req, token: int) -> None:
        self.uids.append(req.uid)
        self.tokens.append(token)
        store = self.scheduler.logprobs
        if store.entries:  # chapter 24: some request asked for log-probabilities
            entry = store.latest(req.uid)
            if entry is not None:
                self.logprob_rows.append(len(self.tokens) - 1)
                self.logprobs.append(entry)

    def process_msg(self, msg: BaseBackendMsg) -> None:
        """Act on one message: queue a request (or refuse it), abort one, report the status, or stop."""
        if isinstance(msg, UserMsg):
            try:
                self._add(msg)
            except ValueError as e:
                self.outbox.append(ErrorMsg(msg.uid, str(e)))
        elif isinstance(msg, AbortBackendMsg):
            self.scheduler.abort_request(msg.uid)
        elif isinstance(msg, GetStatusMsg):
            self.outbox.append(StatusMsg(msg.uid, self.status()))
        elif isinstance(msg, LoraAdapterMsg):  # chapter 31
            try:
                if msg.lora_path is None:
                    self.scheduler.unload_lora_adapter(msg.lora_name)
                else:
                    self.scheduler.load_lora_adapter(msg.lora_name, msg.lora_path)
                self.outbox.append(StatusMsg(msg.uid, self.status()))
            except ValueError as e:
                self.outbox.append(ErrorMsg(msg.uid, str(e)))
        elif isinstance(msg, ExitMsg):
            self.running = False
        else:
            raise MessageError(f"the scheduler does not handle {type(msg).__name__}")

    def _add(self, msg: UserMsg) -> None:
        pending = PendingReq(msg.uid, msg.input_ids, msg.sampling_params)
        mode = self.scheduler.config.disaggregation_mode
        if mode == "null":
            if msg.bootstrap_room is not None:
                raise ValueError("bootstrap_room is for servers started with --disaggregation-mode prefill or decode")
            self.scheduler.add_request(pending)
            return
        if msg.bootstrap_room is None:
            raise ValueError(f"a {mode} server needs each request's bootstrap_room (send it through sglang-router "
                             f"--pd-disaggregation)")
        self.scheduler.add_request(pending, msg.bootstrap_room)

    def send_results(self) -> None:
        """Send what the last step produced: one DetokenizeMsg with all its tokens, then the outbox, in one frame."""
        replies: list[BaseTokenizerMsg] = []
        for uid in [u for u, r in self.scheduler.finished.items() if r.finish_reason == "abort"]:
            self.scheduler.take_finished(uid)  # chapter 29: given up by the prefill side, it never got a token
            replies.append(ErrorMsg(uid, "the prefill server aborted this request"))
        if self.uids:
            reasons = [""] * len(self.uids)
            if self.scheduler.finished:
                last = {uid: i for i, uid in enumerate(self.uids)}  # each request's last token of the step
                for uid in list(self.scheduler.finished):
                    req = self.scheduler.take_finished(uid)
                    if uid in last:
                        reasons[last[uid]] = req.finish_reason
            msg = DetokenizeMsg(self.uids, self.tokens, reasons)
            if self.logprobs:
                msg.logprob_rows, msg.logprobs = self.logprob_rows, [e.logprob for e in self.logprobs]
                msg.top_ids = [[t for t, _ in e.top] for e in self.logprobs]
                msg.top_logprobs = [[v for _, v in e.top] for e in self.logprobs]
            replies.append(msg)
        replies += self.outbox
        if replies:
            self.send.put(batched(replies, BatchTokenizerMsg))
        self.uids, self.tokens, self.outbox = [], [], []
        self.logprob_rows, self.logprobs = [], []

    def status(self) -> dict[str, int]:
        """The scheduler's counters; when nothing runs it also checks the integrity of its tables and pages."""
        sched = self.scheduler
        status = sched.status()
        if sched.idle:
            sched.check_integrity()  # an AssertionError here ends the process: a leak is never served over
            status["integrity_checked"] = 1
        return status

    def run_forever(self, alive=lambda: True) -> None:
        """Receive, step, send until an ExitMsg comes (or `alive()` turns false while idle). If anything fails,
        every request is aborted and freed before the error ends the process."""
        sched = self.scheduler
        if sched.stream is not None:
            sched.stream.wait_stream(torch.cuda.current_stream())
        self._alive = alive  # a held loop asks it too (receive_msgs)
        last: ForwardData | None = None  # the batch in flight (overlap scheduling)
        try:
            while self.running:
                idle = last is None and sched.idle
                msgs = self.receive_msgs(blocking=idle)
                if idle and not msgs and not alive():
                    return
                for msg in msgs:
                    self.process_msg(msg)
                if sched.config.overlap:
                    last = sched.overlap_step(last)
                else:
                    sched.step()
                self.send_results()
        except BaseException:
            sched.abort_all()
            raise


def run_scheduler(model_path: str, engine_args: dict, config: SchedulerConfig | None, addr: str,
                  detokenizer_addr: str, ready=None) -> None:
    """The scheduler process: build the engine (the slow part), report ready with the limits the front end needs,
    then serve until an ExitMsg or the parent's death. A failure to start is reported instead of a silent exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the workers itself
    from minisgl.engine import Engine, EngineConfig

    parent = os.getppid()
    with report_death("scheduler", ready):
        engine = Engine(EngineConfig(model_path, **engine_args))
        scheduler = make_scheduler(engine, config)
        recv = ZmqPullQueue(addr, create=True, decoder=BaseBackendMsg.decoder)
        send = ZmqPushQueue(detokenizer_addr, create=False, encoder=BaseTokenizerMsg.encoder)
        io = SchedulerIO(scheduler, recv, send)
        if ready is not None:
            # The longest request (prompt + output) this scheduler can run: the engine's limit, or the whole KV
            # pool when that is smaller (a request needs a slot for every token but its last).
            slots = scheduler.cache_manager.num_slots
            ready.put({"worker": "scheduler", "max_seq_len": min(engine.max_seq_len, slots + 1),
                       "vocab_size": engine.model_config.vocab_size, "total_slots": slots,
                       "page_size": scheduler.cache_manager.page_size,
                       "max_running_reqs": engine.config.max_running_reqs})
        io.run_forever(alive=lambda: os.getppid() == parent)
        recv.stop()
        send.stop()


def make_scheduler(engine, config: SchedulerConfig | None) -> Scheduler:
    """The scheduler the config asks for: an ordinary one, or one side of a prefill/decode pair (chapter 29), which
    waits here until the other side has joined."""
    config = config or SchedulerConfig()
    mode = config.disaggregation_mode
    if mode == "null":
        return Scheduler(engine, config)
    from minisgl.disagg import DecodeScheduler, KVChannel, PrefillScheduler

    backend = config.disaggregation_transfer_backend
    if backend == "auto":
        backend = "nccl" if engine.device.type == "cuda" else "gloo"
    channel = KVChannel(mode, config.disaggregation_bootstrap_host, config.disaggregation_bootstrap_port, backend)
    return (PrefillScheduler if mode == "prefill" else DecodeScheduler)(engine, config, channel)
