"""Engine: loads the model, sizes and owns the KV cache and the request tables, and runs one batch per call.

The engine owns tensors (weights, the KV pool, the page table and token pool, the attention backend, the
sampler, the graph runner) and runs a batch the scheduler prepared. From chapter 18 on, decode batches
replay CUDA graphs (engine/graph.py) when cuda_graph_max_bs allows.

Chapter 26 (speculative decoding) adds verify batches: forward_verify runs one (a verify row computes its last
token and its drafts) and returns the logits of every position; the scheduler decides what was accepted and
complete_verify moves the requests on by that much. With CUDA graphs, verify batches replay graphs of their own
(engine/verify_graph.py), captured once the scheduler says how many drafts a row takes (capture_verify_graphs).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np
import torch

from minisgl.attention import create_attention_backend
from minisgl.attention.torch_backend import TorchAttnBackend
from minisgl.attention.utils import ints_to_device, prepare_verify
from minisgl.core import Batch, BatchLogprobs, Context, SamplingParams
from minisgl.distributed import get_tp_info, min_across_ranks, split_heads
from minisgl.engine.config import EngineConfig
from minisgl.engine.graph import GraphRunner, capture_sizes
from minisgl.engine.verify_graph import VerifyGraphRunner
from minisgl.engine.sample import BatchSamplingArgs, Sampler, gather_logprobs
from minisgl.env import ENV
from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.models import load_model


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.device = torch.device(config.device)
        if ENV.CPU_THREADS:
            torch.set_num_threads(ENV.CPU_THREADS)
        self.model, self.model_config = load_model(config.model_path, config.torch_dtype, self.device)
        mc = self.model_config
        self.max_seq_len = min(config.max_seq_len if config.max_seq_len is not None else 4096,
                               mc.max_position_embeddings)
        # Under tensor parallelism this rank caches only its own KV heads (chapter 16).
        self.num_kv_heads = split_heads(mc.num_qo_heads, mc.num_kv_heads, get_tp_info().size)[1]
        self.kv_bytes_per_token = 2 * mc.num_layers * self.num_kv_heads * mc.head_dim * config.torch_dtype.itemsize
        # Every rank schedules the same batches, so every rank's pool must be the same size: the smallest.
        self.num_pages = min_across_ranks(config.num_pages if config.num_pages is not None else self._num_kv_pages())
        # With CUDA graphs, one page more than the cache manager hands out: the padding page, where the dummy
        # requests that pad a batch write their keys and values.
        padding_pages = 1 if config.cuda_graph_max_bs else 0
        self.kv_cache = MHAKVCache(self.num_kv_heads, mc.head_dim, mc.num_layers, self.num_pages + padding_pages,
                                   config.page_size, config.torch_dtype, self.device)
        # One row per running request, plus the padding row: never handed out, it is where the dummy requests
        # that pad a batch to a captured graph size read and write. Rows span whole pages.
        row_width = -(-self.max_seq_len // config.page_size) * config.page_size
        self.padding_row = config.max_running_reqs
        self.page_table = torch.zeros(config.max_running_reqs + 1, row_width, dtype=torch.int32, device=self.device)
        self.token_pool = torch.zeros_like(self.page_table)
        self.attn_backend = create_attention_backend(config.attention_backend, self.kv_cache, self.page_table,
                                                     config.page_size, config.torch_dtype)
        self.ctx = Context(config.page_size)
        self.ctx.kv_cache, self.ctx.attn_backend = self.kv_cache, self.attn_backend
        self.ctx.page_table = self.page_table
        self.sampler = Sampler(self.device, config.seed)
        self.graph_runner = None
        self.verify_graphs: VerifyGraphRunner | None = None  # chapter 26: made by capture_verify_graphs
        if config.cuda_graph_max_bs:
            padding_slots = self.num_pages * config.page_size + torch.arange(row_width) % config.page_size
            self.page_table[self.padding_row] = padding_slots.to(self.device)
            sizes = capture_sizes(min(config.cuda_graph_max_bs, config.max_running_reqs))
            self.graph_runner = GraphRunner(self.model, self.ctx, self.attn_backend, sizes, self.padding_row,
                                            self.num_pages * config.page_size, row_width, self.device)

    def _num_kv_pages(self) -> int:
        """How many pages the KV pool gets: what memory allows, but no more than the page table can address."""
        page_bytes = self.kv_bytes_per_token * self.config.page_size
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = int(free * self.config.memory_ratio)
        else:
            budget = self.config.cpu_kv_cache_mb * 2**20
        useful = self.config.max_running_reqs * -(-self.max_seq_len // self.config.page_size)
        pages = min(budget // page_bytes - (1 if self.config.cuda_graph_max_bs else 0), useful)  # padding page
        if pages < 1:
            raise ValueError(f"no room for the KV cache: one page needs {page_bytes} bytes, {budget} available")
        return pages

    def check_request(self, input_ids: Sequence[int] | torch.Tensor, params: SamplingParams) -> None:
        """Refuse what the engine cannot run, before any state changes (ValueError naming the problem)."""
        if not isinstance(params, SamplingParams):
            raise ValueError(f"sampling params must be a SamplingParams, got {type(params).__name__}")
        params.validate()  # again: a field may have changed since the params were made
        ids = input_ids.tolist() if isinstance(input_ids, torch.Tensor) else list(input_ids)
        if not ids:
            raise ValueError("empty prompt: a request needs at least one token")
        vocab = self.model_config.vocab_size
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            raise ValueError(f"token id {bad[0]!r} is outside the vocabulary [0, {vocab})")
        bad = [t for t in params.logit_bias if t >= vocab]
        if bad:
            raise ValueError(f"logit_bias token id {bad[0]} is outside the vocabulary [0, {vocab})")
        if len(ids) + params.max_tokens > self.max_seq_len:
            raise ValueError(f"prompt of {len(ids)} tokens + max_tokens {params.max_tokens} exceeds "
                             f"max_seq_len {self.max_seq_len}")

    def _sample(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        """One token per request; a chunk of an unfinished prompt (chapter 21: it may share its batch with decode
        rows) is not sampled, and gets token 0, which nobody reads. Chapter 24: the requests that asked for
        log-probabilities find them in batch.logprobs."""
        reqs = batch.reqs
        rows = [i for i, r in enumerate(reqs) if r.samples]
        picked = reqs if len(rows) == len(reqs) else [reqs[i] for i in rows]
        if not picked:
            return torch.zeros(len(reqs), dtype=torch.int32, device=logits.device)
        if len(picked) < len(reqs):
            logits = logits[ints_to_device(rows, np.int64, logits.device)]
        args = BatchSamplingArgs.from_reqs(picked, self.device, self.token_pool, self.model_config.eos_token_ids)
        if batch.grammar_mask is not None:  # chapter 25: batch rows -> rows of the sampled logits
            grammar_rows, bitmask = batch.grammar_mask
            where = {row: i for i, row in enumerate(rows)}
            index = ints_to_device([where[r] for r in grammar_rows], np.int64, logits.device)
            args.grammar = (bitmask.to(logits.device, non_blocking=True), index)
        tokens = self.sampler.sample(logits, args)
        if args.logprob_rows is not None:
            asked = [r for r in picked if r.sampling_params.logprobs]
            values = gather_logprobs(logits, tokens, args.logprob_rows, args.top_logprobs)
            batch.logprobs = BatchLogprobs(asked, values)
        if len(picked) == len(reqs):
            return tokens
        out = torch.zeros(len(reqs), dtype=torch.int32, device=logits.device)
        out[ints_to_device(rows, np.int64, logits.device)] = tokens
        return out

    @torch.inference_mode()
    def forward_logits(self, batch: Batch) -> torch.Tensor:
        """The model's logits for a prepared batch: a captured graph's for a decode batch that fits one, else an
        eager pass. One row per request, or (a verify batch, chapter 26) one row per new token."""
        if self.graph_runner is not None and self.graph_runner.can_use(batch):
            return self.graph_runner.replay(batch)
        if self.verify_graphs is not None and self.verify_graphs.can_use(batch):
            return self.verify_graphs.replay(batch)
        if batch.is_verify and batch.input_ids is None:  # chapter 26: flattened only to run eagerly
            prepare_verify(batch, self.token_pool, self.page_table)
        self.attn_backend.prepare_metadata(batch)
        with self.ctx.forward_batch(batch):
            return self.model.forward()

    @torch.inference_mode()
    def forward_batch(self, batch: Batch) -> torch.Tensor:
        """Run a prepared batch (input_ids, positions, out_loc set; slots mapped) and sample one token each.

        Every request then owns one more token: it is written to the token pool and complete_one() is called.
        """
        logits = self.forward_logits(batch)
        next_tokens = self._sample(logits, batch)
        # The token is fed back only if the request may go on; one indexed write for the whole batch.
        feed = [v for i, r in enumerate(batch.reqs) if r.can_decode for v in (i, r.table_idx, r.device_len)]
        if feed:
            picks, rows, cols = ints_to_device(feed, np.int64, self.device).view(-1, 3).unbind(1)
            self.token_pool[rows, cols] = next_tokens[picks]
        for req in batch.reqs:
            req.complete_one()
        return next_tokens

    def capture_verify_graphs(self, k: int) -> None:
        """Chapter 26: capture verify graphs for rows of up to k drafts, beside the decode graphs (none without them).
        The torch backend is not captured on CUDA (it reads lengths on the host); its verify steps stay eager."""
        if self.graph_runner is None or (self.device.type == "cuda" and isinstance(self.attn_backend, TorchAttnBackend)):
            return
        self.verify_graphs = VerifyGraphRunner(self.graph_runner, k, self.page_table, self.token_pool)

    @torch.inference_mode()
    def forward_verify(self, batch: Batch, sample: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Chapter 26: run a prepared verify batch. Returns the logits of every new token [tokens, vocab] and, per
        row, the token the ordinary sampler picks from the row's last position [rows]: the token of a row without
        drafts (its logit processors, grammar mask and log-probabilities apply as in a decode step); None with
        sample=False (every row has drafts: no row keeps it, and the sampler's host work is saved). No request
        changes: complete_verify does that once the accepted drafts are known."""
        logits = self.forward_logits(batch)
        if not sample:
            return logits, None
        last = ints_to_device([n - 1 for n in accumulate(r.extend_len for r in batch.reqs)], np.int64, self.device)
        # Every row is sampled, and rows with drafts ignore theirs: one sampler call for the whole batch keeps each
        # row's processors and grammar-mask rows where they are (batch rows), cheaper than a sub-batch of its own.
        return logits, self._sample(logits[last], batch)

    @torch.inference_mode()
    def complete_verify(self, batch: Batch, accepted: Sequence[int], next_tokens: torch.Tensor) -> None:
        """Chapter 26: row i of a verify batch kept accepted[i] of its drafts and gained next_tokens[i] (a device
        tensor) after them. Its KV is now valid for its last token and the kept drafts; the new token is its next
        input, as after a decode step."""
        # TODO(ch26): for each request: cached_len grows by its accepted drafts + 1 (the last token, then the kept
        # drafts, now have KV); device_len is cached_len + 1 (the new token is known, not computed). Then write each
        # row's next token into the token pool at position cached_len, for the requests that may still decode
        # (req.can_decode), with one indexed write as forward_batch does (next_tokens stays on the device: no value read).
        raise NotImplementedError("TODO(ch26): Engine.complete_verify")
