"""Draft-model proposals: a small model with the target's vocabulary guesses the next tokens one at a time.

The draft is an Engine of its own (weights, KV pool, page table, token pool), driven here without a scheduler.
Its KV pool has a static region per table row: row r owns slots r * W .. r * W + W - 1 (W, the longest sequence),
set once in the page table. So nothing is ever allocated or freed, and forgetting rejected drafts costs nothing:
the draft only remembers, per request, how many of its positions hold KV of tokens the target kept; whatever
lies past that is overwritten the next time. The price is memory for every row at full length, on top of the
target's pool (SGLang's draft workers share the target's allocator instead and hold only what requests use).

Each step, for the requests that may speculate: one extend pass over the tokens of each request that the draft has
not computed yet (a new request's whole prompt; after a verify step, the accepted drafts the draft had not fed and
the target's own token), whose last logits give draft 1; then one decode pass per further draft. A greedy request
takes the draft's argmax; a sampled one draws from the draft's distribution q (after the request's temperature,
top-k and top-p) and hands q's rows to the rejection sampler.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from minisgl.attention.utils import ints_to_device, prepare_batch
from minisgl.core import Batch, Req
from minisgl.engine.config import EngineConfig
from minisgl.engine.engine import Engine
from minisgl.models import ModelConfig
from minisgl.spec.config import SpecConfig
from minisgl.spec.proposer import Proposer
from minisgl.spec.verify import target_probs


def check_draft_model(path, target: Engine) -> None:
    """ValueError unless the draft model at `path` reads and writes the target's vocabulary, and its KV regions (a
    whole sequence for every table row) fit: on the CPU in cpu_kv_cache_mb, on a GPU in the memory left free."""
    mc = ModelConfig.from_path(path)
    vocab = target.model_config.vocab_size
    if mc.vocab_size != vocab:
        raise ValueError(f"the draft model {path} has a vocabulary of {mc.vocab_size} tokens but the target model "
                         f"{target.config.model_path} has {vocab}: a draft must share the target's tokenizer")
    tokens = target.config.max_running_reqs * target.max_seq_len
    need = tokens * 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * target.config.torch_dtype.itemsize
    if target.device.type == "cuda":
        room = torch.cuda.mem_get_info(target.device)[0]
    else:
        room = target.config.cpu_kv_cache_mb * 2**20
    if need > room:
        raise ValueError(f"the draft model's KV regions need {need / 2**20:.0f} MiB (max_running_reqs "
                         f"{target.config.max_running_reqs} x max_seq_len {target.max_seq_len} tokens), more than the "
                         f"{room / 2**20:.0f} MiB " + ("free on the GPU" if target.device.type == "cuda" else
                                                       "of cpu_kv_cache_mb") + ": lower max_running_reqs or max_seq_len")


class DraftProposer(Proposer):
    def __init__(self, config: SpecConfig, target: Engine) -> None:
        check_draft_model(config.draft_model_path, target)
        tc = target.config
        rows = tc.max_running_reqs
        # Same device, dtype, rows and CUDA graphs (for its decode steps) as the target; pages of one slot (the
        # regions are static: no page to share); an attention backend that takes such pages.
        self.engine = Engine(EngineConfig(
            config.draft_model_path, device=tc.device, dtype=tc.dtype, max_running_reqs=rows,
            max_seq_len=target.max_seq_len, page_size=1, num_pages=rows * target.max_seq_len,
            cuda_graph_max_bs=tc.cuda_graph_max_bs,
            attention_backend=tc.attention_backend if tc.attention_backend in ("torch", "triton") else "auto",
            seed=tc.seed))
        if self.engine.max_seq_len < target.max_seq_len:
            raise ValueError(f"the draft model {config.draft_model_path} takes {self.engine.max_seq_len} positions, "
                             f"the target {target.max_seq_len}")
        width = self.engine.page_table.shape[1]
        self.engine.page_table[:rows] = torch.arange(rows * width, dtype=torch.int32,
                                                     device=self.engine.device).view(rows, width)
        self.draft_probs = []
        self.kept: dict[int, tuple[int, int]] = {}  # uid -> (row, leading positions whose draft KV is the request's)
        self._proposed: dict[int, tuple[int, int, int]] = {}  # uid -> (row, tokens known, positions fed), last call

    def accepted(self, req: Req, n: int) -> None:
        """The target accepted the first n drafts of req's last proposal. The draft fed every draft but the last one
        (each decode pass fed the draft before it): its KV is valid for the known tokens and the accepted drafts it
        fed, and nothing after them."""
        # known: the request's tokens at the proposal; fed: the positions whose draft KV the proposal computed.
        row, known, fed = self._proposed.pop(req.uid)
        self.kept[req.uid] = (row, min(known + n, fed))

    def release(self, req: Req) -> None:
        self.kept.pop(req.uid, None)
        self._proposed.pop(req.uid, None)

    def reset(self) -> None:
        self.kept.clear()
        self._proposed.clear()

    def _catch_up(self, req: Req, k: int) -> Req:
        """The draft's request for `req`: its row holds KV for the first `kept` positions (0 for a request it has not
        seen, or one that moved to another row); the tokens from there to the last one are written to the draft's
        token pool and computed by the next pass."""
        ids = req.input_ids
        row, kept = self.kept.get(req.uid, (req.table_idx, 0))
        start = kept if row == req.table_idx else 0
        self.engine.token_pool[req.table_idx, start : len(ids)] = ids[start:].to(self.engine.device, non_blocking=True)
        return Req(ids, req.table_idx, start, k, req.uid, req.sampling_params)

    def _pick(self, logits: torch.Tensor, reqs: list[Req]) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """Each row's draft token from its logits [R, vocab]: the argmax for a greedy request, a draw from q for a
        sampled one (q's row returned, None for greedy rows)."""
        tokens = logits.argmax(dim=-1)
        probs: list[torch.Tensor | None] = [None] * len(reqs)
        sampled = [i for i, r in enumerate(reqs) if not r.sampling_params.is_greedy]
        if sampled:
            q = target_probs(logits[sampled][:, None], [reqs[i].sampling_params for i in sampled])[:, 0]
            draws = torch.multinomial(q, 1, generator=self.engine.sampler.generator).squeeze(1)
            tokens[sampled] = draws
            for j, i in enumerate(sampled):
                probs[i] = q[j]
        return tokens, probs

    @torch.inference_mode()
    def propose(self, reqs: Sequence[Req], ks: Sequence[int]) -> list[list[int]]:
        live = [i for i, k in enumerate(ks) if k > 0]
        drafts: list[list[int]] = [[] for _ in reqs]
        self.draft_probs = [None] * len(reqs)
        if not live:
            return drafts
        engine = self.engine
        dreqs = [self._catch_up(reqs[i], ks[i]) for i in live]
        batch = Batch(dreqs, "prefill")  # the catch-up: any number of tokens per row, the last row's logits
        steps: list[tuple[list[int], torch.Tensor]] = []  # (rows of `live` fed, their tokens) per draft position
        probs: list[list[torch.Tensor]] = [[] for _ in live]
        active = list(range(len(live)))
        for j in range(max(ks[i] for i in live)):
            if j > 0:
                batch = Batch([dreqs[a] for a in active], "decode")
            prepare_batch(batch, engine.token_pool, engine.page_table)
            logits = engine.forward_logits(batch)
            tokens, q = self._pick(logits, batch.reqs)
            steps.append((active, tokens))
            for a, row_q in zip(active, q):
                if row_q is not None:
                    probs[a].append(row_q)
                dreqs[a].complete_one()
            active = [a for a in active if ks[live[a]] > j + 1]  # rows that want another draft feed this one
            if not active:
                break
            picks = [m for m, a in enumerate(steps[-1][0]) if a in set(active)]
            where = [v for a in active for v in (dreqs[a].table_idx, dreqs[a].cached_len)]
            rows, cols = ints_to_device(where, np.int64, engine.device).view(-1, 2).unbind(1)
            engine.token_pool[rows, cols] = tokens[ints_to_device(picks, np.int64, engine.device)].to(torch.int32)
        host = [t.tolist() for _, t in steps]  # one wait for the device, after every pass is queued
        for (fed, _), values in zip(steps, host):
            for a, token in zip(fed, values):
                drafts[live[a]].append(token)
        for a, i in enumerate(live):
            known = len(reqs[i].input_ids)
            self._proposed[reqs[i].uid] = (reqs[i].table_idx, known, known + len(drafts[i]) - 1)
            if probs[a]:
                self.draft_probs[i] = torch.stack(probs[a])
        return drafts
