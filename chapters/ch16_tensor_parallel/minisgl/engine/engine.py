"""Engine: loads the model, sizes and owns the KV cache and the request tables, and runs one batch per call.

The engine owns tensors (weights, the KV pool, the page table and token pool, the attention backend, the
sampler) and runs a batch someone else prepared: which request gets which row and which KV slots is decided
above it (chapter 6's hand-filled batches, then the scheduler of chapter 7), never here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minisgl.attention.torch_backend import TorchAttnBackend
from minisgl.core import Batch, Context, SamplingParams
from minisgl.distributed import get_tp_info, min_across_ranks, split_heads
from minisgl.distributed import get_tp_info, min_across_ranks, split_heads
from minisgl.engine.config import EngineConfig
from minisgl.engine.sample import BatchSamplingArgs, Sampler
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
        self.kv_cache = MHAKVCache(self.num_kv_heads, mc.head_dim, mc.num_layers, self.num_pages, config.page_size,
                                   config.torch_dtype, self.device)
        # One row per running request; rows span whole pages (a request's last page may reach past max_seq_len).
        row_width = -(-self.max_seq_len // config.page_size) * config.page_size
        self.page_table = torch.zeros(config.max_running_reqs, row_width, dtype=torch.int32, device=self.device)
        self.token_pool = torch.zeros_like(self.page_table)
        self.attn_backend = TorchAttnBackend(self.kv_cache, self.page_table)
        self.ctx = Context(config.page_size)
        self.ctx.kv_cache, self.ctx.attn_backend = self.kv_cache, self.attn_backend
        self.ctx.page_table = self.page_table
        self.sampler = Sampler(self.device, config.seed)

    def _num_kv_pages(self) -> int:
        """How many pages the KV pool gets: what memory allows, but no more than the page table can address."""
        page_bytes = self.kv_bytes_per_token * self.config.page_size
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = int(free * self.config.memory_ratio)
        else:
            budget = self.config.cpu_kv_cache_mb * 2**20
        useful = self.config.max_running_reqs * -(-self.max_seq_len // self.config.page_size)
        pages = min(budget // page_bytes, useful)
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
        if len(ids) + params.max_tokens > self.max_seq_len:
            raise ValueError(f"prompt of {len(ids)} tokens + max_tokens {params.max_tokens} exceeds "
                             f"max_seq_len {self.max_seq_len}")

    @torch.inference_mode()
    def forward_batch(self, batch: Batch) -> torch.Tensor:
        """Run a prepared batch (input_ids, positions, out_loc set; slots mapped) and sample one token each.

        Every request then owns one more token: it is written to the token pool and complete_one() is called.
        """
        self.attn_backend.prepare_metadata(batch)
        with self.ctx.forward_batch(batch):
            logits = self.model.forward()
        next_tokens = self.sampler.sample(logits, BatchSamplingArgs.from_reqs(batch.reqs, self.device))
        for req, token in zip(batch.reqs, next_tokens):
            if req.can_decode:  # the token is fed back only if the request may go on
                self.token_pool[req.table_idx, req.device_len] = token
            req.complete_one()
        return next_tokens
