"""Chapter 5: batch metadata and paged attention; the model over the paged cache equals HF greedy."""

from __future__ import annotations

import pytest
import torch

from helpers import assert_close, hf_greedy, model_path, prompt_ids
from minisgl.attention.base import BaseAttnMetadata
from minisgl.attention.torch_backend import TorchAttnBackend
from minisgl.attention.base import make_metadata
from minisgl.attention.utils import gather_rows, make_positions, prepare_batch
from minisgl.core import Batch, Context, Req, SamplingParams, set_global_ctx
from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.kvcache.naive_cache import NaiveCacheManager
from minisgl.models import load_model
from minisgl.scheduler.table import TableManager

ATTN_STUBS = ("TorchAttnBackend.forward_extend", "TorchAttnBackend.forward_decode")
META_STUBS = ("make_positions", "gather_rows", "make_metadata")


def req(prompt_len: int, cached: int = 0, row: int = 0, generated: int = 0) -> Req:
    r = Req(torch.zeros(prompt_len, dtype=torch.int32), row, cached, 8, row, SamplingParams(max_tokens=8))
    r.device_len += generated
    return r


@pytest.mark.stubs("make_positions")
def test_positions_start_at_the_cached_length():
    batch = Batch([req(4), req(6, cached=3, row=1), req(2, row=2)], "prefill")
    got = make_positions(batch, "cpu").tolist()
    assert got == [0, 1, 2, 3, 3, 4, 5, 0, 1], f"prompts of 4, 6 (3 cached) and 2 tokens: positions {got}"


@pytest.mark.stubs("gather_rows")
def test_gather_rows_reads_each_extend_range():
    table = torch.arange(3 * 10).view(3, 10)
    batch = Batch([req(4, cached=1, row=0), req(3, row=2)], "prefill")
    got = gather_rows(table, batch).tolist()
    assert got == [1, 2, 3, 20, 21, 22], f"row 0 positions 1-3, then row 2 positions 0-2: got {got}"


@pytest.mark.stubs("make_metadata")
def test_metadata_offsets():
    batch = Batch([req(4), req(6, cached=3, row=1), req(2, row=2)], "prefill")
    meta = make_metadata(batch, "cpu")
    got = {name: getattr(meta, name).tolist() for name in ("cu_seqlens_q", "cu_seqlens_k", "seq_lens", "cached_lens")}
    want = {"cu_seqlens_q": [0, 4, 7, 9], "cu_seqlens_k": [0, 4, 10, 12], "seq_lens": [4, 6, 2], "cached_lens": [0, 3, 0]}
    for name in want:
        assert got[name] == want[name], f"{name}: {got[name]}, expected {want[name]} (prompts of 4, 6 with 3 cached, 2)"
    for name in ("seq_lens", "cached_lens"):
        assert getattr(meta, name).dtype == torch.int32, f"{name} is {getattr(meta, name).dtype}, expected torch.int32"
    assert (meta.max_seqlen_q, meta.max_seqlen_k) == (4, 6), f"max lengths {(meta.max_seqlen_q, meta.max_seqlen_k)}"
    assert meta.last_indices().tolist() == [3, 6, 8], f"each request's last query row: {meta.last_indices().tolist()}"


def dense_reference(q, k, v, cached: int) -> torch.Tensor:
    """float64 softmax(q k^T / sqrt(d)) v for one request; query j sits at position cached + j."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).double(), v.repeat_interleave(group, 1).double()
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) / q.shape[-1] ** 0.5
    pos_q = torch.arange(cached, cached + q.shape[0])[:, None]
    scores = scores.masked_fill(torch.arange(k.shape[0])[None, :] > pos_q, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def hand_metadata(lengths, cached, rows) -> BaseAttnMetadata:
    """Metadata written out by hand, so the attention tests do not depend on make_metadata."""
    new = [n - c for n, c in zip(lengths, cached)]
    cum = lambda xs: torch.tensor([sum(xs[:i]) for i in range(len(xs) + 1)], dtype=torch.int32)  # noqa: E731
    return BaseAttnMetadata(cu_seqlens_q=cum(new), cu_seqlens_k=cum(lengths),
                            seq_lens=torch.tensor(lengths, dtype=torch.int32),
                            cached_lens=torch.tensor(cached, dtype=torch.int32), table_idx=torch.tensor(rows),
                            max_seqlen_q=max(new), max_seqlen_k=max(lengths))


def scattered_setup(lengths, cached, heads=(4, 2), dim=16, seed=0):
    """Requests whose keys/values are already in a pool at scattered slots (a shuffled allocator)."""
    g = torch.Generator().manual_seed(seed)
    hq, hkv = heads
    cache = MHAKVCache(hkv, dim, 1, num_pages=64)
    table = TableManager.with_new_tables(len(lengths), 32)
    perm = torch.randperm(64, generator=g).to(torch.int32)
    full_k, full_v, start = [], [], 0
    reqs = []
    for i, (n, c) in enumerate(zip(lengths, cached)):
        table.allocate()
        slots = perm[start : start + n]
        start += n
        table.page_table[i, :n] = slots
        k, v = torch.randn(n, hkv, dim, generator=g), torch.randn(n, hkv, dim, generator=g)
        cache.store_kv(k[:c], v[:c], slots[:c], 0)  # only the prefix is cached; the rest comes with the batch
        full_k.append(k), full_v.append(v)
        reqs.append(req(n, cached=c, row=i))
    q = torch.randn(sum(n - c for n, c in zip(lengths, cached)), hq, dim, generator=g)
    return cache, table, reqs, q, full_k, full_v


@pytest.mark.stubs("TorchAttnBackend.forward_extend")
def test_extend_attention_with_cached_prefix_matches_float64():
    lengths, cached = [5, 9, 3], [0, 4, 2]
    cache, table, reqs, q, full_k, full_v = scattered_setup(lengths, cached)
    for r, k, v, c in zip(reqs, full_k, full_v, cached):  # the new tokens' k/v, as the backend would store them
        cache.store_kv(k[c:], v[c:], table.page_table[r.table_idx, c : r.device_len], 0)
    backend = TorchAttnBackend(cache, table.page_table)
    meta = hand_metadata(lengths, cached, [r.table_idx for r in reqs])
    out = backend.forward_extend(q, cache.k_cache(0), cache.v_cache(0), meta, q.shape[-1] ** -0.5)
    start = 0
    for i, (k, v, n, c) in enumerate(zip(full_k, full_v, lengths, cached)):
        ref = dense_reference(q[start : start + n - c], k, v, c)
        got = out[start : start + n - c]
        start += n - c
        assert_close(got, ref, 1e-5, f"request {i} ({n} tokens, {c} cached)", row="position", first_row=c)


@pytest.mark.stubs("TorchAttnBackend.forward_decode")
def test_decode_attention_matches_float64():
    lengths = [7, 2, 11]
    cached = [n - 1 for n in lengths]  # decode: everything but the newest token is cached
    cache, table, reqs, q, full_k, full_v = scattered_setup(lengths, cached, seed=1)
    for r, k, v in zip(reqs, full_k, full_v):
        cache.store_kv(k[-1:], v[-1:], table.page_table[r.table_idx, r.device_len - 1 : r.device_len], 0)
    backend = TorchAttnBackend(cache, table.page_table)
    meta = hand_metadata(lengths, cached, [r.table_idx for r in reqs])
    out = backend.forward_decode(q, cache.k_cache(0), cache.v_cache(0), meta, q.shape[-1] ** -0.5)
    for i, (k, v, c) in enumerate(zip(full_k, full_v, cached)):
        ref = dense_reference(q[i : i + 1], k, v, c)
        assert_close(out[i], ref[0], 1e-5, f"request {i} ({c + 1} tokens) decoding", row="head")


class PagedRunner:
    """Just enough bookkeeping to run the model over the paged cache (chapter 6 turns this into the Engine)."""

    def __init__(self, name: str):
        self.model, self.config = load_model(model_path(name))
        c = self.config
        self.cache = MHAKVCache(c.num_kv_heads, c.head_dim, c.num_layers, num_pages=512)
        self.table = TableManager.with_new_tables(4, 128)
        self.alloc = NaiveCacheManager(512)
        self.backend = TorchAttnBackend(self.cache, self.table.page_table)
        self.ctx = Context()
        self.ctx.kv_cache, self.ctx.attn_backend, self.ctx.page_table = self.cache, self.backend, self.table.page_table

    def forward(self, reqs: list[Req], phase: str) -> list[int]:
        set_global_ctx(self.ctx)
        batch = Batch(reqs, phase)
        slots = self.alloc.allocate(sum(r.extend_len for r in reqs))
        start = 0
        for r in reqs:
            self.table.page_table[r.table_idx, r.cached_len : r.device_len] = slots[start : start + r.extend_len]
            start += r.extend_len
        prepare_batch(batch, self.table.token_pool, self.table.page_table)
        self.backend.prepare_metadata(batch)
        with self.ctx.forward_batch(batch), torch.inference_mode():
            tokens = self.model.forward().argmax(-1).tolist()
        for r, t in zip(reqs, tokens):
            self.table.token_pool[r.table_idx, r.device_len] = t
            r.complete_one()
            r.append_host(t)
        return tokens

    def add(self, ids: list[int], n: int, cached: int = 0, copy_from: Req | None = None) -> Req:
        row = self.table.allocate()
        self.table.token_pool[row, : len(ids)] = torch.tensor(ids)
        if copy_from is not None:
            self.table.page_table[row, :cached] = self.table.page_table[copy_from.table_idx, :cached]
        return Req(torch.tensor(ids, dtype=torch.int32), row, cached, n, row, SamplingParams(max_tokens=n))


@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama"])
@pytest.mark.stubs(*ATTN_STUBS, *META_STUBS)
def test_batched_prefill_and_decode_match_hf(name):
    runner, n = PagedRunner(name), 10
    prompts = prompt_ids(name, 3)
    reqs = [runner.add(p, n) for p in prompts]
    runner.forward(reqs, "prefill")
    while reqs[0].can_decode:
        runner.forward(reqs, "decode")
    for r, p in zip(reqs, prompts):
        assert r.output_ids == hf_greedy(name, p, n), f"{name}: request {r.uid} differs from HF greedy"


@pytest.mark.stubs(*ATTN_STUBS, *META_STUBS)
def test_prefix_already_in_cache_is_reused():
    """The second request shares the first one's prompt: only its new suffix is computed."""
    name, n = "tiny-qwen3", 6
    runner = PagedRunner(name)
    first = prompt_ids(name, 1)[0]
    donor = runner.add(first, 1)
    runner.forward([donor], "prefill")
    second = first + prompt_ids(name, 2)[1][:5]
    reader = runner.add(second, n, cached=len(first), copy_from=donor)
    assert reader.extend_len == 5, f"only the 5 new tokens are computed, not {reader.extend_len}"
    runner.forward([reader], "prefill")
    while reader.can_decode:
        runner.forward([reader], "decode")
    want = hf_greedy(name, second, n)
    assert reader.output_ids == want, f"the request reading the cached prefix: got {reader.output_ids}, HF {want}"
