"""Scheduler: the loop that turns a queue of requests into batches, step after step (continuous batching).

Each step: pick a batch (new requests first, else every running request decodes), give its new tokens KV
slots, run it, then record each request's token and retire the finished ones, which frees their slots for
the requests still waiting.

Overlap scheduling (chapter 11) reorders that step: launch the next batch first, then process the results
of the previous one. On a GPU the forward pass runs asynchronously, so the CPU work of processing (and of
scheduling the batch after) hides behind the GPU's work instead of leaving it idle. It works because the
next batch needs nothing from the CPU side of the last one: its input tokens are read from the token pool
on the device. On the CPU every operation is synchronous, so the same code runs without gaining time.

Mixed batches (chapter 21, `enable_mixed_chunk`, off by default as in SGLang): while a prompt is prefilled,
the running requests decode in the same forward pass instead of waiting for the prompt's last chunk. Their
tokens take one token each of the prefill budget; the prefill requests come first in the batch, then the
decode rows.

Optimistic admission (chapter 23, `admission="optimistic"`; conservative by default): running requests are
counted at an estimate of the KV they will still write (a new-token ratio) instead of all of it, so more requests
run at once when answers end long before max_tokens. Before each decode step the scheduler checks that the step's
pages exist; when they do not, it retracts running requests (their computed prefix stays in the prefix cache),
puts them back at the front of the queue and recomputes them later. A request retracted `max_retractions` times
is pinned: it keeps its whole reservation and is never retracted again.

Log-probabilities (chapter 24): the engine leaves those of a batch's sampled tokens on the batch; they travel to
the CPU with the tokens (same copy, same ready event) and are kept by uid in `logprobs` until the request's
owner collects them, so a retracted request keeps the entries of the tokens it generated before.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NamedTuple

import torch

from minisgl.attention.utils import prepare_batch
from minisgl.core import Batch, Req
from minisgl.engine.engine import Engine
from minisgl.env import ENV
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.decode import DecodeManager
from minisgl.scheduler.prefill import ChunkedReq, PrefillManager
from minisgl.scheduler.retract import NewTokenRatio, pick_victim
from minisgl.scheduler.table import TableManager
from minisgl.scheduler.utils import PendingReq

class ForwardData(NamedTuple):
    """A launched batch and its sampled tokens, which are on the CPU once `ready` has fired."""

    batch: Batch
    next_tokens: torch.Tensor
    ready: torch.cuda.Event | None  # None on the CPU: the tokens are there already
    logprobs: Any = None  # chapter 24: (requests, engine.sample.Logprobs on the CPU once `ready` has fired)


class Scheduler:
    def __init__(self, engine: Engine, config: SchedulerConfig | None = None) -> None:
        self.config = config = config or SchedulerConfig()
        self.engine = engine
        # The bookkeeping over the engine's tensors: who holds which table row, and which KV pages.
        self.table_manager = TableManager(engine.config.max_running_reqs, engine.page_table, engine.token_pool)
        self.cache_manager = CacheManager(engine.num_pages, engine.config.page_size, engine.page_table,
                                          engine.config.cache_type)
        self.prefill_manager = PrefillManager(self.table_manager, self.cache_manager, config.max_extend_tokens)
        self.decode_manager = DecodeManager(self.cache_manager.page_size)
        self.finished: dict[int, Req] = {}
        self._live: dict[int, Req] = {}  # admitted requests that hold a row: what abort_all frees
        self.history: list[tuple[str, list[int]]] = []  # (phase, uids) of every batch run, for traces and tests
        self.on_token: Callable[[Req, int], None] | None = None
        self.on_batch: Callable[[Batch], None] | None = None  # sees each batch before it runs (traces, counts)
        self._freed: set[int] = set()  # requests freed since their last batch was launched: skip their results
        self._unprocessed: list[Batch] = []  # launched batches whose results were not processed yet
        # Chapter 23: admission, and what retraction keeps track of.
        self.optimistic = config.optimistic
        self.new_token_ratio = config.new_token_ratio or NewTokenRatio(ENV.INIT_NEW_TOKEN_RATIO)
        self.retractions: dict[int, int] = {}  # uid -> times retracted, while the request lives
        self.pinned: set[int] = set()  # uids retracted max_retractions times: never retracted again
        self.num_retractions = 0  # retractions since the scheduler was made
        self.on_retract: Callable[[Req], None] | None = None  # sees each retracted request, once it is requeued
        # Chapter 24: uid -> [(logprob of the token, [(token id, logprob), ...] top_logprobs)] per output token, for
        # the requests that asked, from add_request until their owner pops it (LLM, the scheduler's I/O).
        self.logprobs: dict[int, list[tuple[float, list[tuple[int, float]]]]] = {}
        # On a GPU the loop's device work goes to one stream of its own, in order: admission writes, forward
        # passes, and the copies of sampled tokens to the CPU, which the CPU waits for only when it needs them.
        self.stream = torch.cuda.Stream(engine.device) if engine.device.type == "cuda" else None

    def check_request(self, pending: PendingReq) -> None:
        """ValueError if the request could never run on this engine (nothing changes either way)."""
        self.engine.check_request(pending.input_ids, pending.sampling_params)
        cache = self.cache_manager
        need = cache.slots_to_grow(0, pending.slots_needed)  # whole pages
        if need > cache.num_slots:
            raise ValueError(f"request {pending.uid} needs {need} KV slots (whole pages of {cache.page_size}) but "
                             f"the whole pool has {cache.num_slots}")

    def add_request(self, pending: PendingReq) -> None:
        self.check_request(pending)
        self.prefill_manager.add(pending)
        if pending.sampling_params.logprobs:
            self.logprobs[pending.uid] = []

    @property
    def idle(self) -> bool:
        return not self.prefill_manager.pending and not self.decode_manager.running

    def schedule_next_batch(self) -> Batch | None:
        """Prefill first (waiting requests get their first token sooner), otherwise decode all running requests.
        With enable_mixed_chunk, the running requests decode in the prefill batch's forward pass (one mixed
        batch), so a long prompt no longer holds their next token back until its last chunk has run.

        With optimistic admission (chapter 23) the decode rows may be short of pages: running requests are
        retracted until they fit, before any prompt is admitted. None also when the pages of the step will only
        exist once a batch in flight is processed (overlap scheduling): the next call schedules it."""
        if self.idle:
            self.new_token_ratio.reset()  # nothing runs: the next burst starts from the initial estimate
            return None
        if not self.config.enable_mixed_chunk:
            batch = self.prefill_manager.schedule_next_batch(self._reserved())
            if batch is not None:
                return batch
            decode, fits = self._decode_batch()
            return decode if fits else None
        decode, fits = self._decode_batch(self._chunk_slots())
        if not fits:
            return None
        prefill = self.prefill_manager.schedule_next_batch(self._reserved(), decode.size if decode is not None else 0)
        if prefill is None or decode is None:
            return decode if prefill is None else prefill
        return Batch.mixed(prefill, decode)

    def _reserved(self) -> int:
        """KV slots promised to the running requests: all they may still write (conservative admission), or an
        estimate (optimistic, chapter 23). A sum over all of them: only worth it when a prompt waits."""
        if not self.prefill_manager.pending:
            return 0
        ratio = self.new_token_ratio.current if self.optimistic else 1.0
        return self.decode_manager.reserved_slots(ratio, self.pinned)

    def _chunk_slots(self) -> int:
        """Slots that the prompt part-way through its chunks still needs for the rest of the prompt (0 if there is
        none): in a mixed batch it shares the step with the decode rows."""
        pending = self.prefill_manager.pending
        if not self.optimistic or not pending or pending[0].chunked_req is None:
            return 0
        return self.cache_manager.slots_to_grow(pending[0].chunked_req.cached_len, len(pending[0].input_ids))

    def _decode_batch(self, extra: int = 0) -> tuple[Batch | None, bool]:
        """The decode batch of the running requests, and whether its pages (and `extra` more slots) exist now.
        Conservative admission reserved them; optimistic admission retracts requests until they fit."""
        batch = self.decode_manager.schedule_next_batch()
        if not self.optimistic:
            return batch, True
        if batch is not None:
            batch = self._make_room(batch, extra)
        need = extra + (self.cache_manager.slots_for(batch.reqs) if batch is not None else 0)
        return batch, need <= self.cache_manager.available_size

    def _make_room(self, batch: Batch, extra: int = 0) -> Batch | None:
        """Retract requests of a decode batch until the pages of its next step, plus `extra` slots (a chunk that
        continues in the same step), fit in what the pool can give: free pages and unlocked cached ones. The last
        row stays, unless `extra` is work of its own to run. Then the new-token ratio rises (after a retraction)
        or decays (a step that fits as it is). Returns the rows left as a decode batch, None if none is left."""
        cache = self.cache_manager
        reqs = list(batch.reqs)
        retracted = False
        while reqs and cache.slots_for(reqs) + extra > cache.available_size:
            if len(reqs) == 1 and not extra:
                break
            victim = pick_victim(reqs, self.config.retraction_policy, self.pinned)
            if victim is None:
                break
            reqs.remove(victim)
            self._retract(victim)
            retracted = True
        if retracted:
            self.new_token_ratio.after_retraction(self.decode_manager.running)
        else:
            self.new_token_ratio.step()
        return Batch(reqs, "decode") if reqs else None

    def _retract(self, req: Req) -> None:
        """Take a running request out and give back what it holds, to be recomputed later: the whole pages of its
        computed prefix go to the prefix cache (a later prefill finds them there), the rest of its pages and its
        row are freed, and it waits at the front of the queue with its prompt and every token generated so far.
        A result of it still in flight is dropped (its token is computed again). Counted; pinned once retracted
        max_retractions times."""
        self.decode_manager.remove(req)
        if any(req in b.reqs for b in self._unprocessed):
            self._freed.add(req.uid)
        ids = req.input_ids.clone()
        self._free(req)
        count = self.retractions[req.uid] = self.retractions.get(req.uid, 0) + 1
        if count >= self.config.max_retractions:
            self.pinned.add(req.uid)
        self.num_retractions += 1
        self.prefill_manager.requeue(PendingReq(req.uid, ids, req.sampling_params, prompt_len=req.prompt_len))
        if self.on_retract is not None:
            self.on_retract(req)

    def _forget(self, uid: int) -> None:
        """The request left for good (finished or aborted): nothing of its retractions is kept."""
        self.retractions.pop(uid, None)
        self.pinned.discard(uid)

    def is_finished(self, req: Req, token: int) -> bool:
        """Judged on the host copy of the sequence, whose last token is `token` (with overlap, the device side is
        a batch ahead). Plain ints: this runs for every request at every step."""
        eos = self.engine.model_config.eos_token_ids
        hit_eos = not req.sampling_params.ignore_eos and token in eos
        return req.input_ids.shape[0] >= req.max_device_len or hit_eos

    def prepare_batch(self, batch: Batch) -> None:
        """Give every new token of the batch a KV slot (whole pages, recorded in the request's page-table row),
        then flatten the batch (input_ids, positions, out_loc) for the engine. One allocation for the batch."""
        self.cache_manager.allocate_paged(batch.reqs)
        prepare_batch(batch, self.table_manager.token_pool, self.table_manager.page_table)

    def _free(self, req: Req) -> None:
        """Give back the request's KV pages and its table row."""
        self.cache_manager.cache_req(req, finished=True)
        self.table_manager.free(req.table_idx)
        self._live.pop(req.uid, None)

    def _process_last_data(self, batch: Batch, next_tokens: list[int], logprobs: Any = None) -> None:
        """Record each request's new token (and its log-probabilities, chapter 24); finished requests leave and free
        everything they hold."""
        skip, self._freed = self._freed, set()
        prompts = set(batch.prefill_reqs)  # a mixed batch's decode rows are not prompts: nothing new to cache
        entries = logprob_entries(logprobs)
        for req, token in zip(batch.reqs, next_tokens):
            if isinstance(req, ChunkedReq) or req.uid in skip or req.uid in self._freed:
                continue
            req.append_host(token)
            if req in entries and req.uid in self.logprobs:
                self.logprobs[req.uid].append(entries[req])
            if self.on_token is not None:
                self.on_token(req, token)
            if self.is_finished(req, token):
                if req in self.decode_manager.running:
                    self.decode_manager.remove(req)
                self._free(req)
                self._forget(req.uid)
                self.finished[req.uid] = req
                self._freed.add(req.uid)
            elif req in prompts:
                self.cache_manager.cache_req(req, finished=False)  # its prompt becomes shareable right away

    def abort_request(self, uid: int) -> bool:
        """Drop a request wherever it is, freeing its row and pages (a chunked prefill too). False if the
        request is not waiting or running (unknown, or finished already)."""
        with self._on_stream():  # its device writes queue behind the batches already launched
            return self._abort(uid)

    def _abort(self, uid: int) -> bool:
        self.logprobs.pop(uid, None)
        pending = self.prefill_manager.abort(uid)
        if pending is not None:  # waiting: new, retracted (chapter 23), or part-way through its prompt
            self._forget(uid)
            if pending.chunked_req is not None:  # part-way through its prompt: it holds a row and pages
                self._free(pending.chunked_req)
                self._freed.add(uid)
            return True
        for req in self.decode_manager.running:
            if req.uid == uid:
                self.decode_manager.remove(req)
                self._free(req)
                self._forget(uid)
                self._freed.add(uid)  # a batch already launched may still carry it
                return True
        return False

    def _forward(self, batch: Batch) -> torch.Tensor:
        """Prepare a batch and run it. A forward pass that fails (or is interrupted) gives back the KV slots it
        took first: its requests are then exactly as they were before the step, and can be aborted cleanly."""
        self._live.update((r.uid, r) for r in batch.prefill_reqs)  # admitted: each holds a row from now on
        ends = [r.device_len for r in batch.reqs]
        self.prepare_batch(batch)  # KV slots for the new tokens, then the flattened inputs
        try:
            if self.on_batch is not None:
                self.on_batch(batch)
            return self.engine.forward_batch(batch)
        except BaseException:
            self.cache_manager.release_paged(batch.reqs, ends)
            raise

    def abort_all(self) -> None:
        """Drop every request, waiting, admitted or in flight, freeing what it holds, and forget results nobody
        collected. run_until_idle calls it when a step fails or is interrupted, so the same scheduler serves
        the next call; a batch still in flight is dropped with its requests."""
        with self._on_stream():
            self.prefill_manager.pending.clear()
            for req in list(self._live.values()):
                self._free(req)
            self.decode_manager.running.clear()
            self.finished.clear()
            self._freed.clear()
            self._unprocessed.clear()
            self.retractions.clear()
            self.pinned.clear()
            self.logprobs.clear()

    def _launch(self, batch: Batch) -> ForwardData:
        """Run a batch without waiting for its tokens to reach the CPU."""
        tokens = self._forward(batch)
        self._unprocessed.append(batch)
        self.history.append((batch.phase, [r.uid for r in batch.reqs]))
        # Only prompt rows join: a mixed batch's decode rows are in the decode set already.
        self.decode_manager.add([r for r in batch.prefill_reqs if r.can_decode])
        logprobs, batch.logprobs = batch.logprobs, None
        if not tokens.is_cuda:
            return ForwardData(batch, tokens, None, logprobs)
        host = to_host(tokens)
        if logprobs is not None:  # the same kind of copy, queued before the event the CPU waits for
            reqs, lp = logprobs
            logprobs = (reqs, type(lp)(*(to_host(t) for t in (lp.chosen, lp.top_ids, lp.top_values))))
        ready = torch.cuda.Event()
        ready.record()
        return ForwardData(batch, host, ready, logprobs)

    def _process(self, data: ForwardData | None) -> None:
        if data is None:
            return
        if data.ready is not None:
            data.ready.synchronize()  # the only point where the CPU waits for the GPU
        self._unprocessed = [b for b in self._unprocessed if b is not data.batch]
        self._process_last_data(data.batch, data.next_tokens.tolist(), data.logprobs)

    def _on_stream(self):
        return torch.cuda.stream(self.stream) if self.stream is not None else nullcontext()

    def step(self) -> Batch | None:
        """Run one batch to the end (no overlap); None when there is nothing to do."""
        with self._on_stream():
            batch = self.schedule_next_batch()
            if batch is not None:
                self._process(self._launch(batch))
            return batch

    def overlap_step(self, last: ForwardData | None) -> ForwardData | None:
        """Launch the next batch, then process `last` (launched by the previous call) while it runs.
        Returns the batch now in flight, for the next call; None if nothing was launched."""
        with self._on_stream():
            batch = self.schedule_next_batch()
            data = self._launch(batch) if batch is not None else None
            self._process(last)
            return data

    def check_integrity(self) -> None:
        """Every table row is free or held by a live request, and every KV page free, cached or held by a live
        request, exactly once. When nothing runs: every row is free and every page free or cached. Any time between
        steps, and after a retraction (chapter 23)."""
        held = list(self._live.values())
        self.table_manager.check_integrity([r.table_idx for r in held])
        self.cache_manager.check_integrity(held)

    def run_until_idle(self, on_step: Callable[[], None] | None = None) -> None:
        """Step until nothing waits or runs. If anything fails on the way (the forward pass, the sampler, a
        callback) or the run is interrupted (Ctrl-C), every request is aborted and freed before the error goes
        on: the scheduler stays consistent and serves the next call."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream())  # weights and buffers written before the loop
        try:
            self._run(on_step)
        except BaseException:
            self.abort_all()
            raise
        finally:
            if self.stream is not None:
                torch.cuda.current_stream().wait_stream(self.stream)  # callers see everything the loop wrote

    def _run(self, on_step: Callable[[], None] | None) -> None:
        stuck = RuntimeError("requests are waiting but none can be admitted (pool or rows too small?)")
        if not self.config.overlap:
            while not self.idle:
                if self.step() is None:
                    raise stuck
                if on_step is not None:
                    on_step()
            return
        last = None
        while True:
            processed = last is not None
            last = self.overlap_step(last)
            if on_step is not None:
                on_step()
            if last is None:  # nothing in flight: done, or stuck unless processing just freed something
                if self.idle:
                    return
                if not processed:
                    raise stuck


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A copy into pinned CPU memory, queued on the current stream: valid once an event recorded after it fired."""
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    return host


def logprob_entries(logprobs: Any) -> dict[Req, tuple[float, list[tuple[int, float]]]]:
    """Chapter 24: request -> (logprob of its token, its top_logprobs (token id, logprob) pairs, best first), from a
    batch's (requests, Logprobs) on the CPU; each request keeps as many alternatives as it asked for."""
    if logprobs is None:
        return {}
    reqs, lp = logprobs
    chosen, ids, values = lp.chosen.tolist(), lp.top_ids.tolist(), lp.top_values.tolist()
    out = {}
    for i, req in enumerate(reqs):
        k = req.sampling_params.top_logprobs
        out[req] = (chosen[i], list(zip(ids[i][:k], values[i][:k])))
    return out
