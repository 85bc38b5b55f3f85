"""ManualBatcher: Stage 1's scheduler, by hand. Admit requests, prefill them together, decode until done.

Chapter 7 replaces this with a real scheduler; here every step is explicit so the pieces are visible:
a page-table row per request, KV slots for every new token, and a prefix borrowed from another request.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minisgl.core import Batch, Req, SamplingParams
from minisgl.engine.engine import Engine


class ManualBatcher:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
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
        table = self.engine.table
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
        self.engine.prepare_batch(batch)
        tokens = self.engine.forward_batch(batch).tolist()
        for req, token in zip(reqs, tokens):
            req.append_host(token)
        return tokens

    def is_finished(self, req: Req) -> bool:
        eos = self.engine.model_config.eos_token_ids
        hit_eos = not req.sampling_params.ignore_eos and req.output_ids and req.output_ids[-1] in eos
        return not req.can_decode or bool(hit_eos)

    def release(self, req: Req) -> None:
        """Free the request's KV slots and its row. A donor goes last: its borrowers read its slots."""
        if any(b in self._owned_from for b in self._borrowers.get(req, [])):
            raise ValueError(f"request {req.uid} still lends its prefix to running requests: release them first")
        own_from = self._owned_from.pop(req)
        self.engine.cache.free(self.engine.table.page_table[req.table_idx, own_from : req.cached_len])
        self.engine.table.free(req.table_idx)
        self._borrowers.pop(req, None)

    def run(self, reqs: list[Req]) -> None:
        """Prefill every request that has uncomputed prompt tokens, then decode all until each finishes."""
        fresh = [r for r in reqs if r.cached_len < r.prompt_len]
        if fresh:
            self.step(fresh, "prefill")
        while running := [r for r in reqs if not self.is_finished(r)]:
            self.step(running, "decode")

    def generate(self, prompts: list[Sequence[int]], params: SamplingParams) -> list[list[int]]:
        """Convenience: admit, run and release a list of prompts; returns each one's generated token ids."""
        reqs = [self.add(p, params) for p in prompts]
        try:
            self.run(reqs)
        finally:
            for req in reqs:
                self.release(req)
        return [r.output_ids for r in reqs]
