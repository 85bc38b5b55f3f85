"""Chapter 17: GPU attention. The Triton paged kernels against a float64 reference (on a CPU through Triton's
interpreter, on CUDA for real), backend selection, and the engine on each backend against HF greedy."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

ON_CUDA = torch.cuda.is_available()
if not ON_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run in its numpy interpreter

from helpers import (HAS_TRITON, assert_close, attention_reference as reference, hf_greedy, model_path,  # noqa: E402
                     needs_triton, prompt_ids, scattered_kv_cache)
from minisgl.attention import resolve_backend  # noqa: E402
from minisgl.core import SamplingParams  # noqa: E402
from minisgl.llm import LLM  # noqa: E402

if HAS_TRITON:  # Linux only: without it the kernels' tests skip, and backend selection is still tested
    from minisgl.kernel.triton.attention import longest_first, paged_decode_attention, paged_extend_attention

DEVICE = torch.device("cuda" if ON_CUDA else "cpu")
pytestmark = pytest.mark.anydevice  # the whole suite runs on CUDA under `make test-gpu`
KERNEL_STUBS = ("_attend_block", "_extend_kernel")


DTYPES = [(torch.float32, 1e-5)] + ([(torch.bfloat16, 1e-2)] if ON_CUDA else [])


@needs_triton
@pytest.mark.stubs("_attend_block")
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("hq,hkv,dim", [(4, 2, 32), (9, 3, 64), (8, 8, 16)])
@pytest.mark.parametrize("block_n", [64, 128])
def test_decode_kernel_matches_float64(hq, hkv, dim, block_n, dtype, tol):
    """Both block sizes decode_block picks (64 keys for large batches, 128 for one wave), on every device."""
    lens = [1, 70, 33, 129]
    k_cache, v_cache, table, rows = scattered_kv_cache(lens, hkv, dim, dtype, device=DEVICE)
    q = torch.randn(len(lens), hq, dim, generator=torch.Generator().manual_seed(1)).to(DEVICE, dtype)
    seq = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    out = paged_decode_attention(q, k_cache, v_cache, table, rows, seq, dim ** -0.5, block_n=block_n)
    assert out.dtype == dtype, f"the output is {out.dtype}, expected the inputs' {dtype}"
    for i, n in enumerate(lens):
        ref = reference(q[i : i + 1], k_cache, v_cache, table, rows[i], n, n - 1)[0]
        assert_close(out[i], ref, tol, f"request {i} (length {n}) decoding in {dtype}, blocks of {block_n}",
                     row="head")


@needs_triton
@pytest.mark.stubs("_attend_block")
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("splits", [2, 3, 8])
def test_split_k_decode_merges_slices_to_the_float64_result(splits, dtype, tol):
    """Split-K: each request's positions are cut into `splits` slices of whole blocks of 16, so the request of
    length 1 (and the one of 33 with 8 splits) has empty slices, which the merge must ignore."""
    lens = [1, 70, 33, 129, 16]
    hq, hkv, dim = 6, 2, 32
    k_cache, v_cache, table, rows = scattered_kv_cache(lens, hkv, dim, dtype, seed=4, device=DEVICE)
    q = torch.randn(len(lens), hq, dim, generator=torch.Generator().manual_seed(5)).to(DEVICE, dtype)
    seq = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    out = paged_decode_attention(q, k_cache, v_cache, table, rows, seq, dim ** -0.5, block_n=16, splits=splits)
    ref = torch.stack([reference(q[i : i + 1], k_cache, v_cache, table, rows[i], n, n - 1)[0]
                       for i, n in enumerate(lens)])
    for i, n in enumerate(lens):
        assert_close(out[i], ref[i], tol, f"request {i} (length {n}) with {splits} splits", row="head")
    with pytest.raises(ValueError, match="splits"):
        paged_decode_attention(q, k_cache, v_cache, table, rows, seq, dim ** -0.5, splits=0)


@needs_triton
@pytest.mark.stubs("_attend_block")
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("splits", [1, 2])
def test_blocks_of_128_keys_match_float64(splits, dtype, tol):
    """The block a small batch's programs read on the GPU (decode_block): 128 keys, so a request of 300 spans a full,
    a full and a partial block (two slices: 256 and 44 positions)."""
    lens = [1, 129, 300, 70]
    hq, hkv, dim = 4, 2, 32
    k_cache, v_cache, table, rows = scattered_kv_cache(lens, hkv, dim, dtype, seed=8, device=DEVICE)
    q = torch.randn(len(lens), hq, dim, generator=torch.Generator().manual_seed(9)).to(DEVICE, dtype)
    seq = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    out = paged_decode_attention(q, k_cache, v_cache, table, rows, seq, dim ** -0.5, block_n=128, splits=splits)
    for i, n in enumerate(lens):
        ref = reference(q[i : i + 1], k_cache, v_cache, table, rows[i], n, n - 1)[0]
        assert_close(out[i], ref, tol, f"request {i} (length {n}), blocks of 128 keys, {splits} splits", row="head")


@needs_triton
def test_decode_block_grows_only_for_batches_of_one_wave(monkeypatch):
    """128 keys per block in 2 pipeline stages while a batch's programs (requests x KV heads) fit in one wave of
    WAVE_PROGRAMS per multiprocessor; 64 (Triton's default stages) beyond it, off CUDA, and with the switch off."""
    from minisgl.kernel.triton import attention

    monkeypatch.setattr(attention, "_sm_count", lambda device: 132)
    cuda, wave = torch.device("cuda"), attention.WAVE_PROGRAMS * 132
    for batch, kv_heads, want in ((1, 8, (128, 2)), (wave // 8, 8, (128, 2)), (wave // 8 + 1, 8, (64, None)),
                                  (wave // 2, 2, (128, 2)), (256, 8, (64, None))):
        got = attention.decode_block(batch, kv_heads, cuda)
        assert got == want, f"{batch} requests x {kv_heads} KV heads on 132 SMs: expected {want}, got {got}"
    assert attention.decode_block(1, 8, torch.device("cpu")) == (64, None), "off CUDA the block stays at 64"
    monkeypatch.setattr(attention, "SMALL_BATCH_BLOCK", None)
    assert attention.decode_block(1, 8, cuda) == (64, None), "SMALL_BATCH_BLOCK = None must keep blocks of 64"


@needs_triton
@pytest.mark.stubs("_attend_block")
@pytest.mark.parametrize("splits", [1, 3])
def test_an_order_of_the_requests_changes_when_programs_run_not_what_they_compute(splits):
    """The decode kernel may start the requests' programs in any order (longest first on the GPU): every request
    still gets the output it gets in batch order, bit for bit, and the float64 result."""
    lens = [1, 70, 33, 129, 16]
    hq, hkv, dim = 6, 2, 32
    k_cache, v_cache, table, rows = scattered_kv_cache(lens, hkv, dim, torch.float32, seed=6, device=DEVICE)
    q = torch.randn(len(lens), hq, dim, generator=torch.Generator().manual_seed(7)).to(DEVICE)
    seq = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    plain = paged_decode_attention(q, k_cache, v_cache, table, rows, seq, dim ** -0.5, block_n=16, splits=splits)
    for order in (longest_first(np.array(lens)), np.array([4, 0, 3, 2, 1], dtype=np.int32)):
        out = paged_decode_attention(q, k_cache, v_cache, table, rows, seq, dim ** -0.5, block_n=16, splits=splits,
                                     order=torch.from_numpy(order).to(DEVICE))
        for i, n in enumerate(lens):
            assert torch.equal(out[i], plain[i]), (
                f"request {i} (length {n}), programs started in the order {order.tolist()} with {splits} splits: "
                f"differs from batch order by up to {(out[i] - plain[i]).abs().max().item():.3g}")
            ref = reference(q[i : i + 1], k_cache, v_cache, table, rows[i], n, n - 1)[0]
            assert_close(out[i], ref, 1e-5, f"request {i} (length {n}) in the order {order.tolist()}", row="head")


@needs_triton
def test_longest_first_orders_by_context_with_ties_in_batch_order():
    got = longest_first(np.array([5, 9, 5, 12, 9, 1])).tolist()
    assert got == [3, 1, 4, 0, 2, 5], f"longest_first([5, 9, 5, 12, 9, 1]) = {got}, expected [3, 1, 4, 0, 2, 5]"


@needs_triton
def test_decode_metadata_lists_the_batch_longest_first():
    """The Triton backend hands the decode kernel the order of its batch (what it sees at prepare_metadata), and
    none to a prefill batch, whose kernel takes no order."""
    from minisgl.attention.triton_backend import TritonAttnBackend
    from minisgl.core import Batch, Req

    def req(row, prompt, cached):
        return Req(torch.zeros(prompt, dtype=torch.int32), table_idx=row, cached_len=cached, output_len=4, uid=row,
                   sampling_params=SamplingParams(max_tokens=4))

    backend = TritonAttnBackend(kv_cache=None, page_table=torch.zeros(4, 64, dtype=torch.int32))
    decode = Batch([req(0, 7, 6), req(1, 30, 29), req(2, 3, 2), req(3, 30, 29)], "decode")
    backend.prepare_metadata(decode)
    got = decode.attn_metadata.order.tolist()
    assert got == [1, 3, 0, 2], f"decode batch of lengths [7, 30, 3, 30]: order {got}, expected [1, 3, 0, 2]"
    prefill = Batch([req(0, 7, 0), req(1, 30, 0)], "prefill")
    backend.prepare_metadata(prefill)
    assert getattr(prefill.attn_metadata, "order", None) is None, "a prefill batch's metadata carries an order"


@needs_triton
@pytest.mark.stubs("_attend_block", "_extend_kernel")
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("hq,hkv,dim", [(4, 2, 32), (9, 3, 64)])
def test_extend_kernel_matches_float64_over_a_cached_prefix(hq, hkv, dim, dtype, tol):
    lens, cached = [40, 7, 100, 65], [0, 6, 37, 64]  # a fresh prompt, one new token, a chunk, a long prefix
    k_cache, v_cache, table, rows = scattered_kv_cache(lens, hkv, dim, dtype, seed=2, device=DEVICE)
    new = [n - c for n, c in zip(lens, cached)]
    q = torch.randn(sum(new), hq, dim, generator=torch.Generator().manual_seed(3)).to(DEVICE, dtype)
    cu = torch.tensor([0] + torch.tensor(new).cumsum(0).tolist(), dtype=torch.int32, device=DEVICE)
    out = paged_extend_attention(q, k_cache, v_cache, table, rows, torch.tensor(lens, dtype=torch.int32, device=DEVICE),
                                 torch.tensor(cached, dtype=torch.int32, device=DEVICE), cu, max(new), dim ** -0.5)
    assert out.dtype == dtype, f"the output is {out.dtype}, expected the inputs' {dtype}"
    for i, (n, c) in enumerate(zip(lens, cached)):
        ref = reference(q[cu[i] : cu[i + 1]], k_cache, v_cache, table, rows[i], n, c)
        assert_close(out[cu[i] : cu[i + 1]], ref, tol, f"request {i} ({n} tokens, {c} cached) in {dtype}",
                     row="position", first_row=c)


@pytest.mark.stubs("resolve_backend")
def test_backend_selection():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_backend("auto", cpu, torch.float32, 1) == "torch"
    assert resolve_backend("torch", cuda, torch.bfloat16, 1) == "torch"
    assert resolve_backend("auto", cuda, torch.float32, 256) in ("triton", "torch"), "fa has no float32"
    assert resolve_backend("auto", cuda, torch.float32, 1, head_dim=80) == "torch", "the kernels need 2^k head_dim"
    for name, device in [("fa", cpu), ("hybrid", cpu), ("nope", cuda)]:
        with pytest.raises(ValueError, match=name):
            resolve_backend(name, device, torch.bfloat16, 256)
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        with pytest.raises(ValueError, match="needs a CUDA device"):
            resolve_backend("triton", cpu, torch.float32, 1)
        os.environ["TRITON_INTERPRET"] = "1"
        assert resolve_backend("triton", cpu, torch.float32, 1) == "triton", "Triton's interpreter runs on a CPU"
    finally:
        os.environ.pop("TRITON_INTERPRET", None)
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


@pytest.mark.stubs("resolve_backend")
@pytest.mark.parametrize("importable,want", [({"flash_attn", "triton"}, "hybrid"), ({"flash_attn"}, "fa"),
                                             ({"triton"}, "triton"), (set(), "torch")])
def test_auto_prefers_flash_attn_prefill_with_triton_decode(monkeypatch, importable, want):
    """Which libraries import decides what auto picks on CUDA (bf16, pages of 256); here, not on this machine."""
    import minisgl.attention as attention

    monkeypatch.setattr(attention, "_importable", lambda module: module in importable)
    got = resolve_backend("auto", torch.device("cuda"), torch.bfloat16, 256, head_dim=128)
    assert got == want, f"auto with {sorted(importable)} importable picked {got!r}, expected {want!r}"
    if "flash_attn" in importable:
        assert resolve_backend("auto", torch.device("cuda"), torch.bfloat16, 16) != "hybrid", "fa needs 256-slot pages"


@needs_triton
@pytest.mark.stubs(*KERNEL_STUBS)
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama"])
def test_engine_on_the_triton_backend_matches_hf(name):
    prompts = prompt_ids(name, 3)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (6, 9, 4)]
    llm = LLM(model_path(name), device=DEVICE.type, dtype="float32", attention_backend="triton", page_size=4,
              max_running_reqs=2, max_seq_len=128, max_extend_tokens=8)
    assert type(llm.engine.attn_backend).__name__ == "TritonAttnBackend"
    outputs = llm.generate(prompts, params)
    assert [o["token_ids"] for o in outputs] == [hf_greedy(name, p, s.max_tokens) for p, s in zip(prompts, params)]
    llm.scheduler.cache_manager.check_integrity()


@pytest.mark.gpu
@pytest.mark.stubs(*KERNEL_STUBS)
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("backend", ["fa", "hybrid"])
def test_flash_attn_backend_bf16_matches_hf_bf16_on_the_gpu(backend, overlap):
    pytest.importorskip("flash_attn")
    from transformers import AutoModelForCausalLM

    name = "tiny-qwen3"
    prompts = prompt_ids(name, 3)
    llm = LLM(model_path(name), device="cuda", dtype="bfloat16", attention_backend=backend, page_size=256,
              max_running_reqs=3, max_seq_len=512, max_extend_tokens=16, overlap=overlap)
    want = {"fa": "FlashAttnBackend", "hybrid": "HybridAttnBackend"}[backend]
    assert type(llm.engine.attn_backend).__name__ == want, f"{backend} makes a {want}"
    outputs = llm.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
    hf = AutoModelForCausalLM.from_pretrained(model_path(name), dtype=torch.bfloat16).cuda().eval()
    hf.generation_config.eos_token_id = None  # exactly 12 argmax steps, EOS an ordinary token (ignore_eos)
    for prompt, out in zip(prompts, outputs):
        ids = torch.tensor([prompt], device="cuda")
        with torch.inference_mode():
            ref = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=12)[0, len(prompt):].tolist()
        assert out["token_ids"] == ref
    llm.scheduler.cache_manager.check_integrity()
