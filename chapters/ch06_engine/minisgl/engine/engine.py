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
        self.kv_bytes_per_token = 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * config.torch_dtype.itemsize
        self.num_pages = config.num_pages if config.num_pages is not None else self._num_kv_pages()
        self.kv_cache = MHAKVCache(mc.num_kv_heads, mc.head_dim, mc.num_layers, self.num_pages, config.page_size,
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
        # TODO(ch06): on CUDA take memory_ratio of the free memory (torch.cuda.mem_get_info) after the weights,
        # on CPU cpu_kv_cache_mb; cap at enough pages for max_running_reqs full-length requests; raise
        # ValueError if not even one page fits.
        raise NotImplementedError("TODO(ch06): Engine._num_kv_pages")

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
        # TODO(ch06): prepare the attention metadata, run the model inside ctx.forward_batch, sample with the
        # batch's sampling args, write each new token into the token pool at [table_idx, device_len] if the
        # request can still decode, and call complete_one() on every request. Return the tokens.
        raise NotImplementedError("TODO(ch06): Engine.forward_batch")
