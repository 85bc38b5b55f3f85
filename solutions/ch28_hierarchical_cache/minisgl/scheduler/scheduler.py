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

Stage 5 adds features, each an object of its own that keeps its per-request state (`features`): admission and
retraction (chapter 23, admission.py), log-probabilities (24, logprobs.py), grammars (25, grammar.py) and
speculative decoding (26, speculate.py). The scheduler calls each where it runs in the step, and forgets, clears
and reports through all of them in one loop.

Chapter 28 (`enable_hierarchical_cache`, off by default as in SGLang) puts a host tier under the radix cache: the
HiCacheManager (hicache.py) owns it; the scheduler retires its finished copies at every step and waits for the rest
when it runs out of work.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import NamedTuple

import torch

from minisgl.attention.utils import prepare_batch
from minisgl.core import Batch, BatchLogprobs, Req, TokenLogprob
from minisgl.engine.engine import Engine
from minisgl.scheduler.admission import Admission
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.decode import DecodeManager
from minisgl.scheduler.grammar import GrammarManager
from minisgl.scheduler.hicache import HiCacheManager
from minisgl.scheduler.logprobs import LogprobStore, logprob_entries, to_host
from minisgl.scheduler.prefill import ChunkedReq, PrefillManager
from minisgl.scheduler.speculate import Speculation
from minisgl.scheduler.table import TableManager
from minisgl.scheduler.utils import PendingReq


class ForwardData(NamedTuple):
    """A launched batch and its sampled tokens, which are on the CPU once `ready` has fired."""

    batch: Batch
    next_tokens: torch.Tensor
    ready: torch.cuda.Event | None  # None on the CPU: the tokens are there already
    logprobs: BatchLogprobs | None = None  # chapter 24: on the CPU once `ready` has fired


class Scheduler:
    def __init__(self, engine: Engine, config: SchedulerConfig | None = None) -> None:
        self.config = config = config or SchedulerConfig()
        self.engine = engine
        # The bookkeeping over the engine's tensors: who holds which table row, and which KV pages.
        self.table_manager = TableManager(engine.config.max_running_reqs, engine.page_table, engine.token_pool)
        self.cache_manager = CacheManager(engine.num_pages, engine.config.page_size, engine.page_table,
                                          engine.config.cache_type)
        self.hicache = (HiCacheManager(config, engine.kv_cache, self.cache_manager)
                        if config.enable_hierarchical_cache else None)  # chapter 28: before anything is cached
        self.prefill_manager = PrefillManager(self.table_manager, self.cache_manager, config.max_extend_tokens)
        self.decode_manager = DecodeManager(self.cache_manager.page_size)
        self.finished: dict[int, Req] = {}  # uid -> finished request, until its owner takes it (take_finished)
        self._live: dict[int, Req] = {}  # admitted requests that hold a row: what abort_all frees
        self.history: list[tuple[str, list[int]]] = []  # (phase, uids) of every batch run, for traces and tests
        self.on_token: Callable[[Req, int], None] | None = None
        self.on_batch: Callable[[Batch], None] | None = None  # sees each batch before it runs (traces, counts)
        self.on_process: Callable[[Batch], None] | None = None  # sees each batch before its results are recorded
        # sees each request that leaves its place: "finished", "aborted" (a PendingReq if it never ran), "retracted"
        self.on_release: Callable[[Req | PendingReq, str], None] | None = None
        self.on_retract: Callable[[Req], None] | None = None  # sees each retracted request, once it is requeued
        self._freed: set[int] = set()  # requests freed since their last batch was launched: skip their results
        self._unprocessed: list[Batch] = []  # launched batches whose results were not processed yet
        # Stage 5: each feature keeps its own per-request state.
        self.admission = Admission(config, self.prefill_manager, self.decode_manager, self.cache_manager,
                                   self.retract)  # chapter 23
        self.logprobs = LogprobStore()  # chapter 24
        self.grammar = GrammarManager(engine)  # chapter 25
        self.speculation = (Speculation(config.speculative, engine, self.cache_manager)
                            if config.speculative is not None else None)  # chapter 26
        self.features = [f for f in (self.admission, self.logprobs, self.grammar, self.speculation) if f is not None]
        # On a GPU the loop's device work goes to one stream of its own, in order: admission writes, forward
        # passes, and the copies of sampled tokens to the CPU, which the CPU waits for only when it needs them.
        self.stream = torch.cuda.Stream(engine.device) if engine.device.type == "cuda" else None

    def check_request(self, pending: PendingReq) -> None:
        """ValueError if the request could never run on this engine (nothing changes either way); a grammar that
        does not compile is refused here too (chapter 25)."""
        self.engine.check_request(pending.input_ids, pending.sampling_params)
        self.grammar.check(pending.sampling_params)
        cache = self.cache_manager
        need = cache.slots_to_grow(0, pending.slots_needed)  # whole pages
        if need > cache.num_slots:
            raise ValueError(f"request {pending.uid} needs {need} KV slots (whole pages of {cache.page_size}) but "
                             f"the whole pool has {cache.num_slots}")

    def add_request(self, pending: PendingReq) -> None:
        self.check_request(pending)
        self.prefill_manager.add(pending)
        self.logprobs.add(pending)
        self.grammar.add(pending)

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
        admission = self.admission
        if self.hicache is not None:  # chapter 28: copies that finished let go of their nodes
            self.hicache.poll(wait=self.idle)
        if self.idle:
            admission.idle()
            return None
        if not self.config.enable_mixed_chunk:
            batch = self.prefill_manager.schedule_next_batch(admission.reserved())
            if batch is not None:
                return batch
            decode, fits = admission.decode_batch()
            return self._speculate(decode) if fits else None
        decode, fits = admission.decode_batch(admission.chunk_slots())
        if not fits:
            return None
        rows = decode.size if decode is not None else 0
        prefill = self.prefill_manager.schedule_next_batch(admission.reserved(), rows)
        if prefill is None or decode is None:
            return self._speculate(decode) if prefill is None else prefill
        return Batch.mixed(prefill, decode)  # its decode rows decode one token each: no drafts

    def _speculate(self, batch: Batch | None) -> Batch | None:
        """Chapter 26: a decode batch, or the verify batch of its rows when any of them gets drafts."""
        if batch is None or self.speculation is None:
            return batch
        return self.speculation.speculate(batch, self.grammar.matchers)  # a request with a grammar decodes

    def retract(self, req: Req) -> None:
        """Chapter 23: take a running request out and give back what it holds, to be recomputed later: the whole
        pages of its computed prefix go to the prefix cache (a later prefill finds them there), the rest of its
        pages and its row are freed, and it waits at the front of the queue with its prompt and every token
        generated so far. A result of it still in flight is dropped (its token is computed again). Admission
        counts it (and pins it once retracted max_retractions times)."""
        self.decode_manager.remove(req)
        if any(req in b.reqs for b in self._unprocessed):
            self._freed.add(req.uid)
        self._free(req)
        self.admission.retracted(req.uid)
        self.prefill_manager.requeue(PendingReq(req.uid, req.input_ids, req.sampling_params,
                                                prompt_len=req.prompt_len))
        self._released(req, "retracted")
        if self.on_retract is not None:
            self.on_retract(req)

    def finish_reason(self, req: Req, token: int) -> str | None:
        """Why the request ends with `token`, the last token of its host copy (with overlap, the device side is a
        batch ahead): "stop" for an EOS it does not ignore or a complete grammar (chapter 25, whatever ignore_eos
        says), "length" when it reached max_tokens (or the context); None while it goes on. Plain ints: this runs
        for every request at every step."""
        if token in self.engine.model_config.eos_token_ids and not req.sampling_params.ignore_eos:
            return "stop"
        grammar = self.grammar.matchers.get(req.uid)
        if grammar is not None:
            if grammar.finished:
                return "stop"
        return "length" if req.host_len >= req.max_device_len else None  # host_len: no view of input_ids made

    def prepare_batch(self, batch: Batch) -> None:
        """Give every new token of the batch a KV slot (whole pages, recorded in the request's page-table row),
        then flatten the batch (input_ids, positions, out_loc) for the engine. One allocation for the batch."""
        if self.grammar.matchers:  # chapter 25; first: a mask that fails to build leaves no slot allocated
            batch.grammar_mask = self.grammar.mask(batch)
        self.cache_manager.allocate_paged(batch.reqs)
        prepare_batch(batch, self.table_manager.token_pool, self.table_manager.page_table)

    def _free(self, req: Req) -> None:
        """Give back the request's KV pages and its table row (and what the proposer keeps for it, chapter 26)."""
        self.cache_manager.cache_req(req, finished=True)
        self.table_manager.free(req.table_idx)
        self._live.pop(req.uid, None)
        if self.speculation is not None:
            self.speculation.release(req)

    def _released(self, req: Req | PendingReq, reason: str) -> None:
        """The request left its place ("finished", "aborted", "retracted"); the features forget a request that left
        for good."""
        if reason != "retracted":
            for feature in self.features:
                feature.forget(req.uid)
        if self.on_release is not None:
            self.on_release(req, reason)

    def _process_last_data(self, batch: Batch, next_tokens: list, logprobs: BatchLogprobs | None = None) -> None:
        """Record each request's new token (and its log-probabilities, chapter 24); finished requests leave and free
        everything they hold. A verify batch (chapter 26) gives each request a run of tokens: next_tokens[i] is row
        i's list."""
        skip, self._freed = self._freed, set()
        prompts = set(batch.prefill_reqs)  # a mixed batch's decode rows are not prompts: nothing new to cache
        entries = logprob_entries(logprobs)
        for req, token in zip(batch.reqs, next_tokens):
            if isinstance(req, ChunkedReq) or req.uid in skip or req.uid in self._freed:
                continue
            if batch.is_verify:
                reason = self.record_run(req, token, entries)
            else:
                reason = self._record(req, token, entries)
            if reason is not None:
                self._finish(req, reason)
            elif req in prompts:
                self.cache_manager.cache_req(req, finished=False)  # its prompt becomes shareable right away

    def _record(self, req: Req, token: int, entries: dict[Req, TokenLogprob]) -> str | None:
        """Record one new token of a request on the host: its sequence, log-probabilities, grammar and the on_token
        callback. Why the request has finished with it, None if it goes on."""
        req.append_host(token)
        if entries:  # chapter 24: some request of the batch asked for log-probabilities
            self.logprobs.record(req, entries)
        if req.uid in self.grammar.matchers:
            self.grammar.advance(req, token)
        if self.on_token is not None:
            self.on_token(req, token)
        return self.finish_reason(req, token)

    def record_run(self, req: Req, tokens: list[int], entries: dict[Req, TokenLogprob]) -> str | None:
        """Chapter 26: record the tokens a verify step gave a request, in order, as if each came from its own decode
        step. Why the request has finished, if it has: then the tokens after the one that finished it are dropped
        (a run of accepted drafts can go on past an EOS; the device state past it is freed with the request)."""
        for token in tokens:
            reason = self._record(req, token, entries)
            if reason is not None:
                return reason
        return None

    def _finish(self, req: Req, reason: str) -> None:
        """The request ended: it leaves the running set, frees what it holds and waits in `finished`, with its finish
        reason and its log-probabilities (chapter 24), until its owner takes it."""
        if req in self.decode_manager.running:
            self.decode_manager.remove(req)
        self._free(req)
        req.finish_reason, req.logprobs = reason, self.logprobs.take(req.uid)
        self.finished[req.uid] = req
        self._freed.add(req.uid)
        self._released(req, "finished")

    def take_finished(self, uid: int) -> Req | None:
        """The request if it has finished and nobody took it yet; it is no longer kept here."""
        return self.finished.pop(uid, None)

    def abort_request(self, uid: int) -> bool:
        """Drop a request wherever it is, freeing its row and pages (a chunked prefill too). False if the
        request is not waiting or running (unknown, or finished already)."""
        with self._on_stream():  # its device writes queue behind the batches already launched
            return self._abort(uid)

    def _abort(self, uid: int) -> bool:
        pending = self.prefill_manager.abort(uid)
        if pending is not None:  # waiting: new, retracted (chapter 23), or part-way through its prompt
            if pending.chunked_req is not None:  # part-way through its prompt: it holds a row and pages
                self._free(pending.chunked_req)
                self._freed.add(uid)
            self._released(pending.chunked_req or pending, "aborted")
            return True
        for req in self.decode_manager.running:
            if req.uid == uid:
                self.decode_manager.remove(req)
                self._free(req)
                self._freed.add(uid)  # a batch already launched may still carry it
                self._released(req, "aborted")
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
            if batch.is_verify:  # chapter 26
                return self.speculation.verify(batch, ends)
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
            for feature in self.features:
                feature.clear()
            if self.hicache is not None:
                self.hicache.flush()

    def _launch(self, batch: Batch) -> ForwardData:
        """Run a batch without waiting for its tokens to reach the CPU."""
        tokens = self._forward(batch)
        self._unprocessed.append(batch)
        self.history.append((batch.phase, [r.uid for r in batch.reqs]))
        # Only prompt rows join: a mixed batch's decode rows are in the decode set already.
        self.decode_manager.add([r for r in batch.prefill_reqs if r.can_decode])
        logprobs, batch.logprobs = batch.logprobs, None  # chapter 24: they travel with the tokens
        if not tokens.is_cuda:
            return ForwardData(batch, tokens, None, logprobs)
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        if logprobs is not None:  # the same kind of copy, queued before the event the CPU waits for
            logprobs = to_host(logprobs)
        ready = torch.cuda.Event()
        ready.record()
        return ForwardData(batch, host, ready, logprobs)

    def _process(self, data: ForwardData | None) -> None:
        if data is None:
            return
        if data.ready is not None:
            data.ready.synchronize()  # the only point where the CPU waits for the GPU
        self._unprocessed = [b for b in self._unprocessed if b is not data.batch]
        tokens = data.next_tokens.tolist()
        if data.batch.is_verify:  # chapter 26: the decisions read back; the requests move on by them
            tokens = self.speculation.settle(data.batch, tokens, self._freed)
        if self.on_process is not None:
            self.on_process(data.batch)
        self._process_last_data(data.batch, tokens, data.logprobs)

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
            # chapter 25: the next masks need last's tokens; chapter 26: so do the next drafts (unless the proposer
            # backs off), and the next verify step's positions and pages need last's accepted counts (its launch did
            # not wait for them)
            spec = self.speculation
            if last is not None and (self.grammar.matchers
                                     or spec is not None and (last.batch.is_verify or spec.will_propose)):
                self._process(last)
                last = None
            batch = self.schedule_next_batch()
            data = self._launch(batch) if batch is not None else None
            self._process(last)
            return data

    def status(self) -> dict[str, int]:
        """The scheduler's counters (the server's /health): its queues and KV pool, then each feature's."""
        cache = self.cache_manager
        status = {"waiting": len(self.prefill_manager.pending), "running": len(self.decode_manager.running),
                  "available_slots": cache.available_size, "total_slots": cache.num_slots}
        for feature in self.features:
            status |= feature.status()
        if self.hicache is not None:
            status |= self.hicache.status()
        return status

    def check_integrity(self) -> None:
        """Every table row is free or held by a live request, and every KV page free, cached or held by a live
        request, exactly once. When nothing runs: every row is free and every page free or cached. Any time between
        steps, and after a retraction (chapter 23)."""
        held = list(self._live.values())
        self.table_manager.check_integrity([r.table_idx for r in held])
        self.cache_manager.check_integrity(held, self.speculation.in_flight if self.speculation is not None else None)

    def run_until_idle(self, on_step: Callable[[], None] | None = None) -> None:
        """Step until nothing waits or runs. If anything fails on the way (the forward pass, the sampler, a
        callback) or the run is interrupted (Ctrl-C), every request is aborted and freed before the error goes
        on: the scheduler stays consistent and serves the next call."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream())  # weights and buffers written before the loop
        try:
            self._run(on_step)
            if self.hicache is not None:  # idle: every copy done, every lock back with its owner
                self.hicache.flush()
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
