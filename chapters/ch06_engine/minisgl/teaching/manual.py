"""ManualBatcher: Stage 1's scheduler, by hand. Admit requests, prefill them together, decode until done.

Teaching only: the engine never imports it. Chapter 7 replaces it with a real scheduler; here every step is
explicit so the pieces are visible: a page-table row per request, KV slots for every new token, and a prefix
borrowed from another request. Like the scheduler, it owns the bookkeeping (a TableManager over the engine's
tables, a slot allocator over its KV pool) and hands the engine prepared batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minisgl.attention.utils import prepare_batch
from minisgl.core import Batch, Req, SamplingParams
from minisgl.engine.engine import Engine
from minisgl.kvcache.naive_cache import NaiveCacheManager
from minisgl.scheduler.table import TableManager


class ManualBatcher:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.table_manager = TableManager(engine.config.max_running_reqs, engine.page_table, engine.token_pool)
        self.cache_manager = NaiveCacheManager(engine.kv_cache.num_slots, engine.device)
        self._next_uid = 0
        self._owned_from: dict[Req, int] = {}  # first position whose KV slot the request allocated itself
        self._borrowers: dict[Req, list[Req]] = {}  # donor -> requests reading its prefix slots

    def add(self, prompt_ids: Sequence[int], params: SamplingParams, prefix_of: Req | None = None,
            prefix_len: int = 0) -> Req:
        """Admit a request. With prefix_of, its first prefix_len tokens reuse that request's cached KV."""
        self.engine.check_request(prompt_ids, params)
        ids = torch.tensor(list(prompt_ids), dtype=torch.int32)
        if prefix_of is not None:
            if not 0 < prefix_len < len(ids) or prefix_len > prefix_of.cached_len:
                raise ValueError(f"prefix_len {prefix_len} must be in (0, {len(ids)}) and already cached by the "
                                 f"donor ({prefix_of.cached_len} tokens)")
            if not torch.equal(prefix_of.input_ids[:prefix_len], ids[:prefix_len]):
                raise ValueError("the prompt does not start with the donor's first prefix_len tokens")
        table = self.table_manager
        row = table.allocate()
        table.token_pool[row, : len(ids)] = ids.to(table.token_pool.device)
        cached_len = 0
        if prefix_of is not None:
            table.page_table[row, :prefix_len] = table.page_table[prefix_of.table_idx, :prefix_len]
            cached_len = prefix_len
        req = Req(ids, row, cached_len, output_len=params.max_tokens, uid=self._next_uid, sampling_params=params)
        if prefix_of is not None:
            self._borrowers.setdefault(prefix_of, []).append(req)
        self._next_uid += 1
        self._owned_from[req] = req.cached_len
        return req

    def step(self, reqs: list[Req], phase: str) -> list[int]:
        """Give every request slots for its new tokens, run one forward pass, and record the new tokens."""
        batch = Batch(reqs, phase)
        self.prepare(batch)
        tokens = self.engine.forward_batch(batch).tolist()
        for req, token in zip(reqs, tokens):
            req.append_host(token)
        return tokens

    def prepare(self, batch: Batch) -> None:
        """Give every new token of the batch a KV slot, recorded in its request's page-table row, then flatten
        the batch (input_ids, positions, out_loc). One allocation for the whole batch: all or nothing."""
        self.cache_manager.allocate_rows(batch.reqs, self.table_manager.page_table)
        prepare_batch(batch, self.table_manager.token_pool, self.table_manager.page_table)

    def is_finished(self, req: Req) -> bool:
        eos = self.engine.model_config.eos_token_ids
        hit_eos = not req.sampling_params.ignore_eos and req.output_ids and req.output_ids[-1] in eos
        return not req.can_decode or bool(hit_eos)

    def release(self, req: Req) -> None:
        """Free the request's KV slots and its row. A donor goes last: its borrowers read its slots."""
        if any(b in self._owned_from for b in self._borrowers.get(req, [])):
            raise ValueError(f"request {req.uid} still lends its prefix to running requests: release them first")
        own_from = self._owned_from.pop(req)
        self.cache_manager.free(self.table_manager.page_table[req.table_idx, own_from : req.cached_len])
        self.table_manager.free(req.table_idx)
        self._borrowers.pop(req, None)

    def run(self, reqs: list[Req]) -> None:
        """Prefill every request that has uncomputed prompt tokens, then decode all until each finishes."""
        fresh = [r for r in reqs if r.cached_len < r.prompt_len]
        if fresh:
            self.step(fresh, "prefill")
        while running := [r for r in reqs if not self.is_finished(r)]:
            self.step(running, "decode")

    def check_integrity(self) -> None:
        """Every row and KV slot is back (call it once every request is released)."""
        self.table_manager.check_integrity()
        self.cache_manager.check_integrity()

    def generate(self, prompts: list[Sequence[int]], params: SamplingParams) -> list[list[int]]:
        """Convenience: admit, run and release a list of prompts; returns each one's generated token ids."""
        reqs = [self.add(p, params) for p in prompts]
        try:
            self.run(reqs)
        finally:
            for req in reqs:
                self.release(req)
        return [r.output_ids for r in reqs]
