"""Scheduler: the loop that turns a queue of requests into batches, step after step (continuous batching).

Each step: pick a batch (new requests first, else every running request decodes), give its new tokens KV
slots, run it, then record each request's token and retire the finished ones, which frees their slots for
the requests still waiting.

The scheduler owns the bookkeeping: the TableManager (which request holds which row of the engine's tables)
and the cache manager (which KV slots are free). It turns a scheduled batch into what the engine reads
(prepare_batch); the engine only runs it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minisgl.attention.utils import prepare_batch
from minisgl.core import Batch, Req
from minisgl.engine.engine import Engine
from minisgl.kvcache.naive_cache import NaiveCacheManager
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.decode import DecodeManager
from minisgl.scheduler.prefill import PrefillManager
from minisgl.scheduler.table import TableManager
from minisgl.scheduler.utils import PendingReq


class Scheduler:
    def __init__(self, engine: Engine, config: SchedulerConfig | None = None) -> None:
        self.config = config = config or SchedulerConfig()
        self.engine = engine
        self.table_manager = TableManager(engine.config.max_running_reqs, engine.page_table, engine.token_pool)
        self.cache_manager = NaiveCacheManager(engine.kv_cache.num_slots, engine.device)
        self.prefill_manager = PrefillManager(self.table_manager, self.cache_manager, config.max_extend_tokens)
        self.decode_manager = DecodeManager()
        self.finished: dict[int, Req] = {}  # uid -> finished request, until its owner takes it (take_finished)
        self._live: dict[int, Req] = {}  # admitted requests that hold a row: what abort_all frees
        self.history: list[tuple[str, list[int]]] = []  # (phase, uids) of every batch run, for traces and tests
        self.on_token: Callable[[Req, int], None] | None = None

    def check_request(self, pending: PendingReq) -> None:
        """ValueError if the request could never run on this engine (nothing changes either way)."""
        self.engine.check_request(pending.input_ids, pending.sampling_params)
        if pending.slots_needed > self.engine.kv_cache.num_slots:
            raise ValueError(f"request {pending.uid} needs {pending.slots_needed} KV slots but the whole pool has "
                             f"{self.engine.kv_cache.num_slots}")
        if len(pending.input_ids) > self.config.max_extend_tokens:
            raise ValueError(f"prompt of {len(pending.input_ids)} tokens exceeds max_extend_tokens "
                             f"{self.config.max_extend_tokens} (chunked prefill arrives in chapter 10)")

    def add_request(self, pending: PendingReq) -> None:
        self.check_request(pending)
        self.prefill_manager.add(pending)

    @property
    def idle(self) -> bool:
        return not self.prefill_manager.pending and not self.decode_manager.running

    def schedule_next_batch(self) -> Batch | None:
        """Prefill first (waiting requests get their first token sooner), otherwise decode all running requests."""
        # TODO(ch07): ask the prefill manager for a batch, passing the slots the running requests still need;
        # if it has none, fall back to the decode manager's batch.
        raise NotImplementedError("TODO(ch07): Scheduler.schedule_next_batch")

    def is_finished(self, req: Req) -> bool:
        eos = self.engine.model_config.eos_token_ids
        return not req.can_decode or (not req.sampling_params.ignore_eos and req.output_ids[-1] in eos)

    def prepare_batch(self, batch: Batch) -> None:
        """Give every new token of the batch a KV slot, recorded in its request's page-table row, then flatten
        the batch (input_ids, positions, out_loc) for the engine. One allocation for the whole batch."""
        self.cache_manager.allocate_rows(batch.reqs, self.table_manager.page_table)
        prepare_batch(batch, self.table_manager.token_pool, self.table_manager.page_table)

    def _free(self, req: Req) -> None:
        """Give back the request's KV slots (positions 0..cached_len-1) and its table row."""
        self.cache_manager.free(self.table_manager.page_table[req.table_idx, : req.cached_len])
        self.table_manager.free(req.table_idx)
        self._live.pop(req.uid, None)

    def _process_last_data(self, batch: Batch, next_tokens: list[int]) -> None:
        """Record each request's new token; finished requests leave and free everything they hold."""
        # TODO(ch07): append each token on the host (and call on_token if set); a finished request is freed,
        # removed from the running set if it was decoding, and stored in self.finished; an unfinished request
        # of a prefill batch joins the decode manager.
        raise NotImplementedError("TODO(ch07): Scheduler._process_last_data")

    def _forward(self, batch: Batch) -> torch.Tensor:
        """Prepare a batch and run it. A forward pass that fails (or is interrupted) gives back the KV slots it
        took first: its requests are then exactly as they were before the step, and can be aborted cleanly."""
        if batch.is_prefill:
            self._live.update((r.uid, r) for r in batch.reqs)  # admitted: each holds a row from now on
        ends = [r.device_len for r in batch.reqs]
        self.prepare_batch(batch)  # KV slots for the new tokens, then the flattened inputs
        try:
            return self.engine.forward_batch(batch)
        except BaseException:
            self.cache_manager.release_rows(batch.reqs, ends, self.table_manager.page_table)
            raise

    def take_finished(self, uid: int) -> Req | None:
        """The request if it has finished and nobody took it yet; it is no longer kept here."""
        return self.finished.pop(uid, None)

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
        """When nothing runs: every table row and KV slot is free."""
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
