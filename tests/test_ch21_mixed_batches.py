"""Chapter 21: mixed prefill + decode batches. Running requests decode in the same forward pass as a prefill
chunk: their tokens are charged to the chunk's budget, the output stays HF greedy token for token (chunked
prefill, radix cache, overlap, pages of 1 and 4, aborts), and a long prompt arriving no longer stalls them for
its whole prefill: the longest gap between two tokens of a running request is one step."""

from __future__ import annotations

import os

import pytest
import torch

ON_CUDA = torch.cuda.is_available()
if not ON_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: the Triton test runs in its interpreter

from helpers import (BF16_MARGIN, assert_clean, hf_greedy, hf_greedy_cuda, model_path, needs_triton,  # noqa: E402
                     pending, prompt_ids, tokenizer)
from minisgl.core import Batch, Req, SamplingParams  # noqa: E402
from minisgl.llm import LLM  # noqa: E402
from minisgl.scheduler.config import SchedulerConfig  # noqa: E402
from minisgl.scheduler.prefill import ChunkedReq, PrefillManager  # noqa: E402
from minisgl.scheduler.scheduler import Scheduler  # noqa: E402
from minisgl.scheduler.utils import PendingReq  # noqa: E402

ALL_STUBS = ("Batch.mixed", "Batch.prefill_reqs", "PrefillManager.schedule_next_batch",
             "Scheduler.schedule_next_batch")
LONG_TEXT = ("Paged attention stores the keys and values of every request in fixed-size blocks, so memory is "
             "allocated on demand and shared prefixes can be reused across requests without copying.")


def make_req(uid: int, prompt_len: int, cached: int = 0) -> Req:
    return Req(torch.arange(1, prompt_len + 1, dtype=torch.int32), uid, cached, 4, uid, SamplingParams(max_tokens=4))


@pytest.mark.stubs("Batch.prefill_reqs")
def test_a_batch_knows_its_prompt_rows_and_its_decode_rows():
    chunk, prompt = make_req(0, 12), make_req(1, 5)
    running = [make_req(2, 7, cached=6), make_req(3, 3, cached=2)]
    mixed = Batch([chunk, prompt, *running], "mixed", num_prefill=2)
    assert mixed.prefill_reqs == [chunk, prompt], f"prefill rows of the mixed batch: {mixed.prefill_reqs}"
    assert mixed.decode_reqs == running, f"decode rows of the mixed batch: {mixed.decode_reqs}"
    assert Batch(running, "decode").prefill_reqs == [], "a decode batch computes no prompt tokens"
    assert Batch([chunk, prompt], "prefill").prefill_reqs == [chunk, prompt], "a prefill batch: every request"
    with pytest.raises(ValueError, match="num_prefill"):
        Batch([chunk, *running], "mixed")  # where the decode rows start must be said


@pytest.mark.stubs("Batch.mixed")
def test_a_mixed_batch_lists_its_prompt_rows_first():
    chunk, prompt = make_req(0, 12), make_req(1, 5)
    running = [make_req(2, 7, cached=6), make_req(3, 3, cached=2)]
    batch = Batch.mixed(Batch([chunk, prompt], "prefill"), Batch(running, "decode"))
    assert batch.phase == "mixed" and batch.reqs == [chunk, prompt, *running], "prompt rows first, then decode rows"
    assert batch.num_prefill == 2, f"the decode rows start at 2, got num_prefill={batch.num_prefill}"
    with pytest.raises(ValueError, match="decode"):
        Batch.mixed(Batch(running, "decode"), Batch([chunk], "prefill"))


@pytest.mark.stubs("PrefillManager.schedule_next_batch")
def test_the_prefill_budget_is_charged_one_token_per_decode_row():
    llm = LLM(model_path("tiny-qwen3"), max_running_reqs=3, max_seq_len=128, max_extend_tokens=16)
    sched = llm.scheduler
    manager = PrefillManager(sched.table_manager, sched.cache_manager, max_extend_tokens=16)
    manager.add(pending(0, 40, 4))
    first = manager.schedule_next_batch(reserved=0, decode_rows=5)
    assert [r.extend_len for r in first.reqs] == [11], "16 tokens of budget minus 5 decode rows leave 11"
    sched.prepare_batch(first)
    llm.engine.forward_batch(first)  # the chunk's 11 tokens are cached now
    assert manager.schedule_next_batch(reserved=0, decode_rows=16) is None, "16 decode rows leave no prompt token"
    assert manager.schedule_next_batch(reserved=0, decode_rows=20) is None
    assert len(manager.pending) == 1 and manager.pending[0].chunked_req is first.reqs[0], "the chunk waits, untouched"
    second = manager.schedule_next_batch(reserved=0)
    assert [(r.cached_len, r.device_len) for r in second.reqs] == [(11, 27)], "no decode rows: the whole budget"
    chunk = manager.pending[0].chunked_req
    sched.cache_manager.cache_req(chunk, finished=True)
    sched.table_manager.free(chunk.table_idx)
    assert_clean(sched)


def arrival_run(name: str = "tiny-qwen3", mixed: bool = True, overlap: bool = False, page_size: int = 1,
                budget: int = 16, before_run=None, **config):
    """Three short requests start; once each has 2 tokens, a prompt of several budgets arrives. Returns the
    prompts, the outputs by uid, the batches (phase, [(uid, new tokens, chunk?)]) and the LLM. before_run(llm)
    is called before the requests run."""
    tok = tokenizer(name)
    shorts = [prompt_ids(name, 4)[i] for i in (0, 1, 3)]
    prompts = shorts + [tok.encode(LONG_TEXT)]
    llm = LLM(model_path(name), max_running_reqs=4, max_seq_len=256, page_size=page_size, max_extend_tokens=budget,
              overlap=overlap, enable_mixed_chunk=mixed, **config)
    sched = llm.scheduler
    batches, tokens = [], {uid: 0 for uid in range(4)}
    sched.on_batch = lambda b: batches.append(
        (b.phase, [(r.uid, r.extend_len, isinstance(r, ChunkedReq)) for r in b.reqs]))
    sched.on_token = lambda req, _: tokens.__setitem__(req.uid, tokens[req.uid] + 1)
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    for uid, ids in enumerate(shorts):
        sched.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32), params))

    arrived = []

    def arrive() -> None:
        if not arrived and all(tokens[uid] >= 2 for uid in range(3)):
            arrived.append(3)
            sched.add_request(PendingReq(3, torch.tensor(prompts[3], dtype=torch.int32),
                                         SamplingParams(max_tokens=8, ignore_eos=True)))

    if before_run is not None:
        before_run(llm)
    sched.run_until_idle(arrive)
    outputs = {uid: sched.finished.pop(uid).output_ids for uid in range(4)}
    return prompts, outputs, batches, llm


def longest_gaps(batches, uids) -> dict[int, int]:
    """Per request: the most batches between two batches that give it a token (chunks give none)."""
    gaps = {}
    for uid in uids:
        steps = [i for i, (_, rows) in enumerate(batches) for u, _, chunk in rows if u == uid and not chunk]
        gaps[uid] = max(b - a for a, b in zip(steps, steps[1:]))
    return gaps


def check_outputs(name, prompts, outputs):
    for uid, prompt in enumerate(prompts):
        want = hf_greedy(name, prompt, len(outputs[uid]))
        assert outputs[uid] == want, f"request {uid} ({len(prompt)}-token prompt) differs from HF greedy"


@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_a_long_prompt_arriving_stalls_running_requests_one_step_at_most(overlap, page_size):
    prompts, outputs, batches, llm = arrival_run(overlap=overlap, page_size=page_size)
    assert [len(outputs[u]) for u in range(4)] == [20, 20, 20, 8]
    check_outputs("tiny-qwen3", prompts, outputs)
    pieces = [(phase, rows) for phase, rows in batches if any(u == 3 and n > 1 for u, n, _ in rows)]
    chunks = [rows for _, rows in pieces if any(u == 3 and chunk for u, _, chunk in rows)]
    assert len(chunks) >= 3, f"the long prompt ran in {len(chunks)} chunks: the fixture needs several"
    assert all(phase == "mixed" for phase, _ in pieces), \
        f"the running requests ride along every piece of the long prompt: phases {[p for p, _ in pieces]}"
    for rows in chunks:
        assert sum(n for _, n, _ in rows) == 16, f"a chunk's batch uses the whole budget, decode rows included: {rows}"
    assert all(sum(n for _, n, _ in rows) <= 16 for _, rows in batches), "no batch exceeds the budget"
    gaps = longest_gaps(batches, range(3))
    assert all(g == 1 for g in gaps.values()), f"longest gap (in batches) between two tokens of each request: {gaps}"
    assert_clean(llm)


@pytest.mark.stubs("Batch.prefill_reqs", "PrefillManager.schedule_next_batch")
def test_without_mixing_running_requests_wait_for_the_whole_prefill():
    prompts, outputs, batches, llm = arrival_run(mixed=False)
    check_outputs("tiny-qwen3", prompts, outputs)
    assert not any(phase == "mixed" for phase, _ in batches), "mixing is off"
    prefills = sum(1 for phase, rows in batches if phase == "prefill" and any(u == 3 for u, _, _ in rows))
    gaps = longest_gaps(batches, range(3))
    assert min(gaps.values()) == prefills + 1, \
        f"every running request waits out the {prefills} prefill batches of the long prompt: gaps {gaps}"
    assert_clean(llm)


@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
@pytest.mark.parametrize("name,page_size", [("tiny-llama", 4), ("tiny-qwen3", 1)])
def test_mixing_with_the_radix_cache_matches_hf(name, page_size, overlap):
    """Prompts that share prefixes, outputs of 1 to 12 tokens (a request can finish in its prompt row), a small
    budget, then a second call that starts from the cached prefixes."""
    tok = tokenizer(name)
    base = tok.encode(LONG_TEXT)
    prompts = [base[:12], base[:40], base[:7] + prompt_ids(name, 1)[0], base]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (12, 1, 9, 5)]
    llm = LLM(model_path(name), max_running_reqs=3, max_seq_len=128, page_size=page_size, max_extend_tokens=12,
              overlap=overlap, enable_mixed_chunk=True)
    for round_ in range(2):
        outputs = llm.generate(prompts, params)
        phases = [phase for phase, _ in llm.scheduler.history]
        assert "mixed" in phases, f"round {round_}: no mixed batch ran ({phases})"
        for prompt, p, out in zip(prompts, params, outputs):
            assert out["token_ids"] == hf_greedy(name, prompt, p.max_tokens), \
                f"round {round_}: {len(prompt)}-token prompt differs from HF greedy"
        assert_clean(llm)
        prompts = [p + base[:5] for p in prompts]  # the second round extends the cached prompts


@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_aborts_while_mixing_free_everything(overlap):
    """A running request and the long prompt (mid-chunk) are aborted while they share mixed batches."""
    name = "tiny-qwen3"
    tok = tokenizer(name)
    prompts = prompt_ids(name, 3) + [tok.encode(LONG_TEXT)]
    llm = LLM(model_path(name), max_running_reqs=4, max_seq_len=256, page_size=4, max_extend_tokens=12,
              overlap=overlap, enable_mixed_chunk=True)
    sched = llm.scheduler
    for uid, ids in enumerate(prompts):
        params = SamplingParams(max_tokens=10, ignore_eos=True)
        sched.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32), params))
    aborted = []

    def on_step() -> None:
        long_started = any(p.uid == 3 and p.chunked_req is not None for p in sched.prefill_manager.pending)
        if long_started and not aborted and sched.history[-1][0] == "mixed":
            aborted.extend([sched.abort_request(1), sched.abort_request(3)])

    sched.run_until_idle(on_step)
    assert aborted == [True, True], "both were aborted while running (the long prompt part-way through its chunks)"
    assert sorted(sched.finished) == [0, 2]
    for uid in (0, 2):
        assert sched.finished[uid].output_ids == hf_greedy(name, prompts[uid], 10), f"request {uid} differs from HF"
    assert_clean(llm)


def test_mixing_is_off_by_default():
    llm = LLM(model_path("tiny-qwen3"), max_running_reqs=2, max_seq_len=64)
    assert llm.scheduler.config.enable_mixed_chunk is (os.environ.get("MINISGL_ENABLE_MIXED_CHUNK", "0") in ("1", "true"))
    assert Scheduler(llm.engine, SchedulerConfig(enable_mixed_chunk=True)).config.enable_mixed_chunk


@needs_triton
@pytest.mark.anydevice
@pytest.mark.stubs(*ALL_STUBS)
def test_mixed_batches_on_the_triton_extend_kernel_match_hf():
    """The Triton extend kernel (chapter 17) takes a mix of query lengths: 1 for the decode rows, a chunk's."""
    device = "cuda" if ON_CUDA else "cpu"
    prompts, outputs, batches, llm = arrival_run(mixed=True, page_size=4, device=device, dtype="float32",
                                                 attention_backend="triton")
    assert type(llm.engine.attn_backend).__name__ == "TritonAttnBackend"
    assert any(phase == "mixed" for phase, _ in batches)
    check_outputs("tiny-qwen3", prompts, outputs)
    assert_clean(llm)


# ----------------------------------------------------------------------------- on the GPU (make test-gpu)

GPU_CASES = [("torch", "float32", 4), ("triton", "float32", 4), ("fa", "bfloat16", 256)]


@pytest.mark.gpu
@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
@pytest.mark.parametrize("backend,dtype,page", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_mixed_batches_on_every_gpu_backend_with_graphs_for_decode_only(backend, dtype, page, overlap):
    if backend == "fa":
        pytest.importorskip("flash_attn")
    name = "tiny-qwen3"
    replayed = []

    def watch_replays(llm) -> None:
        runner = llm.engine.graph_runner
        assert runner is not None, "cuda_graph_max_bs=8 captures graphs"
        original = runner.replay
        runner.replay = lambda batch: replayed.append(batch.phase) or original(batch)

    prompts, outputs, batches, llm = arrival_run(name, mixed=True, overlap=overlap, page_size=page, device="cuda",
                                                 dtype=dtype, attention_backend=backend, cuda_graph_max_bs=8,
                                                 before_run=watch_replays)
    assert replayed and set(replayed) == {"decode"}, f"graphs replay pure decode batches only: {set(replayed)}"
    assert any(phase == "mixed" for phase, _ in batches)
    for uid, prompt in enumerate(prompts):
        if dtype == "float32":
            assert outputs[uid] == hf_greedy(name, prompt, len(outputs[uid])), f"{backend}: request {uid} differs"
            continue
        want, gaps = hf_greedy_cuda(name, prompt, len(outputs[uid]), torch.bfloat16)
        sure = next((i for i, gap in enumerate(gaps) if gap < BF16_MARGIN), len(gaps))
        assert outputs[uid][:sure] == want[:sure], f"bf16 request {uid} differs before HF's first near-tie ({sure})"
    assert_clean(llm)


@pytest.mark.stubs(*ALL_STUBS)
def test_only_rows_that_end_a_prompt_or_decode_are_sampled():
    """A chunk of an unfinished prompt shares its batch with decode rows but is not sampled: the sampler sees
    exactly the decode rows and the prompts that end in this batch."""
    seen = []  # per batch: (phase, holds a chunk, rows to sample, rows the sampler saw)

    def spy(llm):
        engine = llm.engine
        sample, forward, calls = engine.sampler.sample, engine.forward_batch, []

        def counted_sample(logits, args):
            calls.append(logits.shape[0])
            return sample(logits, args)

        def counted_forward(batch):
            calls.clear()
            out = forward(batch)
            chunks = sum(isinstance(r, ChunkedReq) for r in batch.reqs)
            seen.append((batch.phase, chunks > 0, len(batch.reqs) - chunks, sum(calls)))
            return out

        engine.sampler.sample, engine.forward_batch = counted_sample, counted_forward

    prompts, outputs, batches, llm = arrival_run(before_run=spy)
    wrong = [s for s in seen if s[2] != s[3]]
    assert not wrong, f"(phase, chunk?, rows to sample, rows the sampler saw) that differ: {wrong[:3]}"
    assert any(phase == "mixed" and chunk and rows for phase, chunk, rows, _ in seen), \
        "the scenario must run a mixed batch that holds a chunk and decode rows"
    for uid, ids in enumerate(prompts):
        assert outputs[uid] == hf_greedy("tiny-qwen3", ids, 20 if uid < 3 else 8), f"request {uid} differs from HF"
    assert_clean(llm)
