"""Scheduler: the loop that turns a queue of requests into batches, step after step (continuous batching).

Each step: pick a batch (new requests first, else every running request decodes), give its new tokens KV
slots, run it, then record each request's token and retire the finished ones, which frees their slots for
the requests still waiting.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minisgl.attention.utils import prepare_batch
from minisgl.core import Batch, Req
from minisgl.engine.engine import Engine
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.decode import DecodeManager
from minisgl.scheduler.prefill import ChunkedReq, PrefillManager
from minisgl.scheduler.table import TableManager
from minisgl.scheduler.utils import PendingReq


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
        self.finished: dict[int, Req] = {}  # uid -> finished request, until its owner takes it (take_finished)
        self._live: dict[int, Req] = {}  # admitted requests that hold a row: what abort_all frees
        self.history: list[tuple[str, list[int]]] = []  # (phase, uids) of every batch run, for traces and tests
        self.on_token: Callable[[Req, int], None] | None = None
        self.on_batch: Callable[[Batch], None] | None = None  # sees each batch before it runs (traces, counts)

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

    @property
    def idle(self) -> bool:
        return not self.prefill_manager.pending and not self.decode_manager.running

    def schedule_next_batch(self) -> Batch | None:
        """Prefill first (waiting requests get their first token sooner), otherwise decode all running requests."""
        # The running requests' reservation is a sum over all of them: only worth it when a prompt waits.
        reserved = self.decode_manager.reserved_slots() if self.prefill_manager.pending else 0
        batch = self.prefill_manager.schedule_next_batch(reserved)
        return batch if batch is not None else self.decode_manager.schedule_next_batch()

    def is_finished(self, req: Req) -> bool:
        eos = self.engine.model_config.eos_token_ids
        return not req.can_decode or (not req.sampling_params.ignore_eos and req.output_ids[-1] in eos)

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

    def _process_last_data(self, batch: Batch, next_tokens: list[int]) -> None:
        """Record each request's new token; finished requests leave and free everything they hold."""
        joined = []
        for req, token in zip(batch.reqs, next_tokens):
            if isinstance(req, ChunkedReq):  # a prefill chunk: no token yet, the request waits for its next chunk
                continue
            req.append_host(token)
            if self.on_token is not None:
                self.on_token(req, token)
            if self.is_finished(req):
                self._free(req)
                if batch.is_decode:
                    self.decode_manager.remove(req)
                self.finished[req.uid] = req
            elif batch.is_prefill:
                self.cache_manager.cache_req(req, finished=False)  # its prompt becomes shareable right away
                joined.append(req)
        self.decode_manager.add(joined)

    def take_finished(self, uid: int) -> Req | None:
        """The request if it has finished and nobody took it yet; it is no longer kept here."""
        return self.finished.pop(uid, None)

    def abort_request(self, uid: int) -> bool:
        """Drop a request wherever it is, freeing its row and pages (a chunked prefill too). False if the
        request is not waiting or running (unknown, or finished already)."""
        pending = self.prefill_manager.abort(uid)
        if pending is not None:
            if pending.chunked_req is not None:  # part-way through its prompt: it holds a row and pages
                self._free(pending.chunked_req)
            return True
        for req in self.decode_manager.running:
            if req.uid == uid:
                self.decode_manager.remove(req)
                self._free(req)
                return True
        return False

    def _forward(self, batch: Batch) -> torch.Tensor:
        """Prepare a batch and run it. A forward pass that fails (or is interrupted) gives back the KV slots it
        took first: its requests are then exactly as they were before the step, and can be aborted cleanly."""
        if batch.is_prefill:
            self._live.update((r.uid, r) for r in batch.reqs)  # admitted: each holds a row from now on
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
        """Drop every request, waiting or admitted, freeing what it holds, and forget results nobody collected.
        run_until_idle calls it when a step fails or is interrupted, so the same scheduler serves the next call."""
        self.prefill_manager.pending.clear()
        for req in list(self._live.values()):
            self._free(req)
        self.decode_manager.running.clear()
        self.finished.clear()

    def step(self) -> Batch | None:
        """Run one batch; None when there is nothing to do."""
        batch = self.schedule_next_batch()
        if batch is None:
            return None
        next_tokens = self._forward(batch).tolist()
        self._process_last_data(batch, next_tokens)
        self.history.append((batch.phase, [r.uid for r in batch.reqs]))
        return batch

    def check_integrity(self) -> None:
        """When nothing runs: every table row is free and every KV page free or cached exactly once."""
        self.table_manager.check_integrity()
        self.cache_manager.check_integrity()

    def run_until_idle(self, on_step: Callable[[], None] | None = None) -> None:
        """Step until nothing waits or runs. If anything fails on the way (the forward pass, the sampler, a
        callback) or the run is interrupted (Ctrl-C), every request is aborted and freed before the error goes
        on: the scheduler stays consistent and serves the next call."""
        try:
            while not self.idle:
                if self.step() is None:
                    raise RuntimeError("requests are waiting but none can be admitted (pool or rows too small?)")
                if on_step is not None:
                    on_step()
        except BaseException:
            self.abort_all()
            raise
