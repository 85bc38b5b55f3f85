"""Engine: loads the model, sizes and owns the KV cache, and runs one batch per call.

From chapter 18 on, decode batches replay CUDA graphs (engine/graph.py) when cuda_graph_max_bs allows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minisgl.attention import create_attention_backend
from minisgl.attention.utils import prepare_batch
from minisgl.core import Batch, Context, SamplingParams, set_global_ctx
from minisgl.engine.config import EngineConfig
from minisgl.engine.graph import GraphRunner, capture_sizes
from minisgl.engine.sample import BatchSamplingArgs, Sampler
from minisgl.env import ENV
from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.models import load_model
from minisgl.scheduler.cache import CacheManager, div_ceil
from minisgl.scheduler.table import TableManager


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.device = torch.device(config.device)
        if ENV.CPU_THREADS:
            torch.set_num_threads(ENV.CPU_THREADS)
        self.model, self.model_config = load_model(config.model_path, config.torch_dtype, self.device)
        mc = self.model_config
        self.max_seq_len = min(config.max_seq_len or 4096, mc.max_position_embeddings)
        self.kv_bytes_per_token = 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * config.torch_dtype.itemsize
        self.num_pages = config.num_pages or self._num_kv_pages()
        # With CUDA graphs, one page more than the cache manager hands out: the padding page, where the dummy
        # requests that pad a batch write their keys and values.
        padding_pages = 1 if config.cuda_graph_max_bs else 0
        self.kv_cache = MHAKVCache(mc.num_kv_heads, mc.head_dim, mc.num_layers, self.num_pages + padding_pages,
                                   config.page_size, config.torch_dtype, self.device)
        # Rows span whole pages: a request's last page may reach past max_seq_len.
        row_width = div_ceil(self.max_seq_len, config.page_size) * config.page_size
        self.table = TableManager(config.max_running_reqs, row_width, self.device)
        self.cache = CacheManager(self.num_pages, config.page_size, self.table.page_table, config.cache_type)
        self.attn_backend = create_attention_backend(config.attention_backend, self.kv_cache, self.table.page_table,
                                                     config.page_size, config.torch_dtype)
        self.ctx = Context(config.page_size)
        self.ctx.kv_cache, self.ctx.attn_backend = self.kv_cache, self.attn_backend
        self.ctx.page_table = self.table.page_table
        set_global_ctx(self.ctx)
        self.sampler = Sampler(self.device, config.seed)
        self.graph_runner = None
        if config.cuda_graph_max_bs:
            padding_slots = self.num_pages * config.page_size + torch.arange(row_width) % config.page_size
            self.table.page_table[self.table.padding_row] = padding_slots.to(self.device)
            sizes = capture_sizes(min(config.cuda_graph_max_bs, config.max_running_reqs))
            self.graph_runner = GraphRunner(self.model, self.ctx, self.attn_backend, sizes, self.table.padding_row,
                                            self.num_pages * config.page_size, row_width, self.device)

    def _num_kv_pages(self) -> int:
        """How many pages the KV pool gets: what memory allows, but no more than the page table can address."""
        page_bytes = self.kv_bytes_per_token * self.config.page_size
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = int(free * self.config.memory_ratio)
        else:
            budget = self.config.cpu_kv_cache_mb * 2**20
        useful = self.config.max_running_reqs * div_ceil(self.max_seq_len, self.config.page_size)
        pages = min(budget // page_bytes - (1 if self.config.cuda_graph_max_bs else 0), useful)  # padding page
        if pages < 1:
            raise ValueError(f"no room for the KV cache: one page needs {page_bytes} bytes, {budget} available")
        return pages

    def check_request(self, input_ids: Sequence[int] | torch.Tensor, params: SamplingParams) -> None:
        """Refuse what the engine cannot run, before any state changes (ValueError naming the problem)."""
        if not isinstance(params, SamplingParams):
            raise ValueError(f"sampling params must be a SamplingParams, got {type(params).__name__}")
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

    def prepare_batch(self, batch: Batch) -> None:
        """Give every new token of the batch a KV slot (whole pages, recorded in the request's page-table row),
        then flatten the batch (input_ids, positions, out_loc). One allocation for the whole batch."""
        self.cache.allocate_paged(batch.reqs)
        if batch.is_decode:
            self._prepare_decode(batch)
        else:
            prepare_batch(batch, self.table.token_pool, self.table.page_table)

    def _prepare_decode(self, batch: Batch) -> None:
        """prepare_batch for one new token per request: one indexed read of each table, not a slice per request."""
        index = torch.tensor([[r.table_idx, r.cached_len] for r in batch.reqs]).to(self.device, non_blocking=True)
        rows, cols = index.unbind(1)
        batch.input_ids = self.table.token_pool[rows, cols]
        batch.out_loc = self.table.page_table[rows, cols]
        batch.positions = cols

    @torch.inference_mode()
    def forward_batch(self, batch: Batch) -> torch.Tensor:
        """Run a prepared batch (input_ids, positions, out_loc set; slots mapped) and sample one token each.

        Every request then owns one more token: it is written to the token pool and complete_one() is called.
        """
        if self.graph_runner is not None and self.graph_runner.can_use(batch):
            logits = self.graph_runner.replay(batch)
        else:
            self.attn_backend.prepare_metadata(batch)
            with self.ctx.forward_batch(batch):
                logits = self.model.forward()
        next_tokens = self.sampler.sample(logits, BatchSamplingArgs.from_reqs(batch.reqs, self.device))
        # The token is fed back only if the request may go on; one indexed write for the whole batch.
        feed = [(i, r.table_idx, r.device_len) for i, r in enumerate(batch.reqs) if r.can_decode]
        if feed:
            picks, rows, cols = torch.tensor(feed).to(self.device, non_blocking=True).unbind(1)
            self.table.token_pool[rows, cols] = next_tokens[picks]
        for req in batch.reqs:
            req.complete_one()
        return next_tokens
