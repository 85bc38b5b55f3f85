"""Chapter 16: tensor parallelism. The head split, the per-rank weight slices, the parallel layers against their
unsharded versions on 2 real gloo ranks, rank 0's work protocol, and whole LLMs with tp_size 2 and 4 that must
give HF greedy's tokens (chunked prefill and the radix cache included). A killed rank must end the group with
a clear error within seconds. On a machine with 2+ GPUs (`make test-gpu`) the same runs on NCCL."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from functools import lru_cache

import pytest
import torch
import torch.nn.functional as F

from helpers import BF16_MARGIN, hf_greedy, hf_greedy_cuda, model_path, tokenizer
from minisgl.core import SamplingParams
from minisgl.distributed import DistributedInfo, get_tp_info, split_heads
from minisgl.distributed.launch import run_on_ranks
from minisgl.engine import EngineConfig
from minisgl.layers.activation import SiluAndMul
from minisgl.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from minisgl.layers.linear import LinearColParallelMerged, LinearRowParallel
from minisgl.llm import LLM
from minisgl.llm.tp import check_tp_config, receive_work
from minisgl.models import ModelConfig
from minisgl.models.weight import shard_weight

GREEDY = SamplingParams(max_tokens=10, ignore_eos=True)
# Small prefill budget: the long prompt below is prefilled in chunks. Radix cache (the default): the second
# call's prompts start with the first call's, so their prefixes come from the cache.
GROUP_CONFIG = dict(max_running_reqs=4, max_seq_len=160, num_pages=600, max_extend_tokens=24)
LONG = ("Tensor parallelism splits every weight matrix across devices so that a model too large for one "
        "device still runs, at the price of one all-reduce per block.")


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


# ----------------------------------------------------------------------------- the head split
@pytest.mark.stubs("split_heads")
@pytest.mark.parametrize("heads, kv, tp, want", [
    ((4, 2, 2, (2, 1))), ((8, 2, 2, (4, 1))), ((32, 8, 4, (8, 2))),  # KV heads split
    ((4, 2, 4, (1, 1))), ((8, 2, 4, (2, 1))), ((16, 2, 8, (2, 1))),  # fewer KV heads than ranks: replicated
    ((9, 3, 1, (9, 3))),
])
def test_split_heads_shares_heads_out(heads, kv, tp, want):
    assert split_heads(heads, kv, tp) == want, f"split_heads({heads}, {kv}, {tp})"


@pytest.mark.stubs("split_heads")
@pytest.mark.parametrize("heads, kv, tp", [(9, 3, 2), (6, 6, 4), (8, 3, 4), (12, 6, 4), (4, 2, 0)])
def test_split_heads_refuses_what_does_not_divide(heads, kv, tp):
    with pytest.raises(ValueError, match="tp_size"):
        split_heads(heads, kv, tp)


@pytest.mark.stubs("split_heads")
def test_bad_configurations_fail_before_any_process_starts():
    before = set(mp.active_children())
    with pytest.raises(ValueError, match="9 attention heads cannot be split evenly across tp_size 2"):
        LLM(model_path("smollm2"), tp_size=2)  # SmolLM2-135M: 9 query heads, 3 KV heads
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="tp_size must be an integer >= 1"):
            LLM(model_path("tiny-qwen3"), tp_size=bad)
    with pytest.raises(ValueError, match="needs 2 GPUs, but 0 are visible"):
        check_tp_config(2, EngineConfig(model_path("tiny-qwen3"), device="cuda"))  # the suite hides CUDA
    assert set(mp.active_children()) == before, "a refused configuration started processes"


# ----------------------------------------------------------------------------- the weight slices
TINY = ModelConfig.from_path(model_path("tiny-qwen3"))  # 4 query heads, 2 KV heads


def shards(name: str, full: torch.Tensor, tp: int) -> list[torch.Tensor]:
    return [shard_weight(name, full, TINY, DistributedInfo(r, tp)) for r in range(tp)]


@pytest.mark.stubs("shard_weight")
@pytest.mark.parametrize("tp", [2, 4])
def test_shard_weight_cuts_rows_and_columns(tp):
    w = torch.randn(24, 16)
    for module, dim in [("q_proj", 0), ("gate_proj", 0), ("up_proj", 0), ("o_proj", 1), ("down_proj", 1)]:
        parts = shards(f"model.layers.0.mlp.{module}.weight", w, tp)
        assert all(p.is_contiguous() for p in parts), f"{module}: shards must be contiguous"
        assert torch.equal(torch.cat(parts, dim=dim), w), f"{module}: the {tp} shards do not rebuild the weight along dim {dim}"
        assert len({tuple(p.shape) for p in parts}) == 1, f"{module}: ranks got shards of different shapes"
    norm = torch.randn(16)
    for r, p in enumerate(shards("model.layers.0.input_layernorm.weight", norm, tp)):
        assert torch.equal(p, norm), f"rank {r}: a norm weight must be replicated whole"


@pytest.mark.stubs("shard_weight")
def test_shard_weight_pads_the_vocabulary():
    vocab = torch.randn(10, 4)  # 10 rows over 4 ranks: 3 each, the last rank holds 1 row and 2 of padding
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        parts = shards(name, vocab, 4)
        assert [tuple(p.shape) for p in parts] == [(3, 4)] * 4, f"{name}: each rank holds ceil(10 / 4) rows"
        whole = torch.cat(parts)
        assert torch.equal(whole[:10], vocab) and not whole[10:].any(), f"{name}: rows in order, zero padding"


@pytest.mark.stubs("shard_weight", "split_heads")
@pytest.mark.parametrize("tp, heads_of_ranks", [(2, [0, 1]), (4, [0, 0, 1, 1])])
def test_shard_weight_gives_each_rank_whole_kv_heads(tp, heads_of_ranks):
    d = TINY.head_dim
    k = torch.arange(TINY.num_kv_heads * d * 3, dtype=torch.float32).view(TINY.num_kv_heads * d, 3)
    for r, p in enumerate(shards("model.layers.1.self_attn.k_proj.weight", k, tp)):
        head = heads_of_ranks[r]
        assert torch.equal(p, k[head * d:(head + 1) * d]), f"rank {r} of {tp} should hold KV head {head} whole"
    bias = torch.arange(TINY.num_kv_heads * d, dtype=torch.float32)
    for r, p in enumerate(shards("model.layers.1.self_attn.v_proj.bias", bias, tp)):
        head = heads_of_ranks[r]
        assert torch.equal(p, bias[head * d:(head + 1) * d]), f"rank {r}: the v bias follows its head"


# ----------------------------------------------------------------------------- the layers on 2 gloo ranks
HIDDEN, INTER, VOCAB = 32, 48, 37  # 37: the vocabulary does not divide by 2, so the last rank holds padding


def full_weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(16)
    return {"gate_up": torch.randn(2 * INTER, HIDDEN, generator=g), "down": torch.randn(HIDDEN, INTER, generator=g),
            "embed": torch.randn(VOCAB, HIDDEN, generator=g), "x": torch.randn(5, HIDDEN, generator=g),
            "ids": torch.tensor([0, 18, 19, 36, 5, 36, 20])}


def rank_layer_checks() -> dict[str, object]:
    """Runs in each rank: every parallel layer on this rank's slice, loaded by hand (not with shard_weight).
    Each check's result or exception is returned, so one failing layer does not hide the others."""
    info, w = get_tp_info(), full_weights()
    mine = lambda t: t.chunk(info.size)[info.rank]  # noqa: E731 - this rank's rows
    padded = torch.cat([w["embed"], torch.zeros(-VOCAB % info.size, HIDDEN)])

    def mlp():
        up = LinearColParallelMerged(HIDDEN, [INTER, INTER])
        up.weight = torch.cat([mine(half) for half in w["gate_up"].chunk(2)])  # [gate | up], each cut by rank
        down = LinearRowParallel(INTER, HIDDEN)
        down.weight = w["down"].chunk(info.size, dim=1)[info.rank]
        return down(SiluAndMul()(up(w["x"])))

    def embedding():
        emb = VocabParallelEmbedding(VOCAB, HIDDEN)
        emb.weight = mine(padded)
        return emb(w["ids"])

    def lm_head():
        head = ParallelLMHead(VOCAB, HIDDEN)
        head.weight = mine(padded)
        return head(w["x"])

    def row_bias():
        return LinearRowParallel(INTER, HIDDEN, bias=True)  # should raise: see the test

    out = {}
    for name, check in (("mlp", mlp), ("embedding", embedding), ("lm_head", lm_head), ("row_bias", row_bias)):
        try:
            out[name] = check()
        except Exception as e:  # noqa: BLE001 - handed back to the test, which raises it
            out[name] = e
    return out


@lru_cache(maxsize=1)
def layer_results() -> list[dict[str, object]]:
    return run_on_ranks(rank_layer_checks, 2)


def ranks_agree(name: str) -> torch.Tensor:
    per_rank = [r[name] for r in layer_results()]
    for result in per_rank:
        if isinstance(result, BaseException):
            raise result
    assert all(torch.equal(per_rank[0], r) for r in per_rank), f"{name}: the ranks got different results"
    return per_rank[0]


def rank_fails_or_waits_in_a_collective() -> None:
    """Rank 1 raises its own error; rank 0 waits for it in an all-reduce, which breaks when rank 1 exits."""
    if get_tp_info().rank == 1:
        raise ValueError("rank 1's own error")
    torch.distributed.all_reduce(torch.ones(1))


def test_a_failing_rank_is_reported_by_its_own_error_not_by_the_peer_it_broke(monkeypatch):
    """Both ranks' reports are waiting when the launcher looks (a busy machine): it must raise the error rank 1
    raised, not the broken all-reduce rank 0 saw after rank 1 left, though it reads rank 0's report first."""
    from minisgl.distributed import launch

    def late_wait(conns, timeout=None):
        time.sleep(3.0)  # both ranks have reported by now
        return sorted(wait(conns, timeout), key=conns.index)  # rank 0's broken all-reduce first

    wait = launch.wait
    monkeypatch.setattr(launch, "wait", late_wait)
    with pytest.raises(BaseException) as raised:
        run_on_ranks(rank_fails_or_waits_in_a_collective, 2, timeout=60)
    assert isinstance(raised.value, ValueError) and "rank 1's own error" in str(raised.value), (
        f"run_on_ranks raised {type(raised.value).__name__}: {str(raised.value)[:200]}; the root cause is rank 1's "
        "ValueError (rank 0's all-reduce only broke because rank 1 had exited)")


@pytest.mark.stubs("LinearRowParallel.forward")
def test_column_then_row_parallel_mlp_equals_the_unsharded_mlp():
    w = full_weights()
    want = F.linear(SiluAndMul()(F.linear(w["x"], w["gate_up"])), w["down"])
    got = ranks_agree("mlp")
    assert got.shape == want.shape and rel_err(got, want) < 1e-5, f"MLP over 2 ranks: rel error {rel_err(got, want):.2e}"


def test_a_row_parallel_layer_refuses_a_bias():
    for rank, result in enumerate(r["row_bias"] for r in layer_results()):
        assert isinstance(result, ValueError) and "bias" in str(result), (
            f"rank {rank} of 2: LinearRowParallel(bias=True) gave {result!r}. Added to every rank's partial sum, a "
            "bias would be in the all-reduce tp_size times (and forward adds none): refuse it, a ValueError naming the bias")


@pytest.mark.stubs("VocabParallelEmbedding.forward")
def test_vocab_parallel_embedding_equals_the_full_lookup():
    w = full_weights()
    want = F.embedding(w["ids"], w["embed"])
    got = ranks_agree("embedding")
    assert got.shape == want.shape, f"embedding shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert torch.equal(got, want), "each id's row must come from exactly one rank (ids 18/19 sit at the boundary)"


@pytest.mark.stubs("ParallelLMHead.forward")
def test_lm_head_gathers_the_whole_vocabulary():
    w = full_weights()
    want = F.linear(w["x"], w["embed"])
    got = ranks_agree("lm_head")
    assert got.shape == want.shape, f"logits shape {tuple(got.shape)}, want {tuple(want.shape)} (padding cut off)"
    assert rel_err(got, want) < 1e-5, f"LM head over 2 ranks: rel error {rel_err(got, want):.2e}"


# ----------------------------------------------------------------------------- rank 0's work protocol
@pytest.mark.stubs("receive_work")
def test_rank0_refuses_bad_requests_and_passes_good_ones_on():
    llm = LLM(model_path("tiny-qwen3"), max_running_reqs=2, max_seq_len=64, num_pages=100)
    caller, rank0 = mp.Pipe()
    caller.send([([5, 6, 7], GREEDY), ([], GREEDY)])  # one bad prompt: the whole call is refused
    caller.send([([5, 6, 7], GREEDY), ([8, 9], SamplingParams(max_tokens=3))])
    caller.send(None)
    pending = receive_work(llm, rank0)
    kind, error = caller.recv()
    assert kind == "refused" and isinstance(error, ValueError) and "empty prompt" in str(error), (kind, error)
    assert [p.input_ids.tolist() for p in pending] == [[5, 6, 7], [8, 9]], "the good call's requests, in order"
    assert len({p.uid for p in pending}) == 2, "each request needs its own uid"
    assert receive_work(llm, rank0) is None, "None from the caller means stop"
    assert not caller.poll(), "nothing more should be sent back"


# ----------------------------------------------------------------------------- whole LLMs
def workload(name: str) -> list[list[list[int]]]:
    """Three generate calls: short prompts; a long prompt (chunked prefill); prompts extending call 1's."""
    tok = tokenizer(name)
    first = [tok.encode(t) for t in ("The scheduler picks which requests run next", "Paged memory")]
    return [first, [tok.encode(LONG)], [first[0] + tok.encode(" and then"), first[1] + tok.encode(" is")]]


def run_workload(llm: LLM, name: str) -> list[list[list[int]]]:
    return [[o["token_ids"] for o in llm.generate(call, GREEDY)] for call in workload(name)]


@lru_cache(maxsize=None)
def tp_outputs(name: str, tp: int) -> list[list[list[int]]]:
    llm = LLM(model_path(name), tp_size=tp, **GROUP_CONFIG)
    try:
        return run_workload(llm, name)
    finally:
        llm.shutdown()


@pytest.mark.stubs("split_heads", "shard_weight", "receive_work", "LinearRowParallel.forward",
                   "VocabParallelEmbedding.forward", "ParallelLMHead.forward")
# tiny-llama has 8 query heads and 2 KV heads: over 4 ranks each KV head is replicated on two of them.
@pytest.mark.parametrize("name, tp", [("tiny-qwen3", 2), ("tiny-llama", 4)])
def test_tensor_parallel_llm_matches_hf_greedy_and_tp1(name, tp):
    got = tp_outputs(name, tp)
    single, want = LLM(model_path(name), **GROUP_CONFIG), []
    for c, call in enumerate(workload(name)):
        want.append([o["token_ids"] for o in single.generate(call, GREEDY)])
        prefills = sum(phase == "prefill" for phase, _ in single.scheduler.history)
        assert c != 1 or prefills > 2, f"call 1 should prefill the long prompt in several chunks, not {prefills}"
    for c, (call, outs) in enumerate(zip(workload(name), got)):
        for i, (ids, out) in enumerate(zip(call, outs)):
            assert out == hf_greedy(name, ids, GREEDY.max_tokens), f"{name} tp={tp}, call {c} prompt {i}: not HF greedy"
    assert got == want, f"{name}: tp={tp} differs from tp=1"


@pytest.mark.stubs("split_heads", "shard_weight", "receive_work", "LinearRowParallel.forward",
                   "VocabParallelEmbedding.forward", "ParallelLMHead.forward")
def kill_rank_1_and_expect_a_quick_error(llm: LLM) -> None:
    """SIGKILL rank 1: the next call fails within seconds with an error naming it, and no rank is left running
    (rank 0 is not left waiting in a collective)."""
    ranks = llm.rank_processes
    os.kill(ranks[1].pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 1 died"):
        llm.generate([[3, 4, 5]], GREEDY)
    elapsed = time.monotonic() - t0
    # A dead rank is noticed by its process sentinel at once; without that, rank 0 would wait in a collective for the
    # group's timeout (a day). The bound is far above what a loaded machine adds to stopping the ranks.
    assert elapsed < 60, f"the dead rank was noticed only after {elapsed:.1f} s"
    assert not any(p.is_alive() for p in ranks), "the other ranks must be stopped, not left hanging"


def test_sampling_refusals_and_a_killed_rank():
    """One group for three behaviours: sampled tokens agree on every rank (rank 0 refuses to answer
    otherwise), a bad prompt is refused without harming the group, and a killed rank ends it quickly."""
    llm = LLM(model_path("tiny-llama"), tp_size=2, **GROUP_CONFIG)
    try:
        ranks = llm.rank_processes
        assert len(ranks) == 2 and all(p.is_alive() for p in ranks), "tp_size 2 runs two rank processes"
        sampled = llm.generate([[3, 4, 5]] * 3, SamplingParams(temperature=0.9, top_k=50, max_tokens=8,
                                                                ignore_eos=True))
        assert [len(o["token_ids"]) for o in sampled] == [8, 8, 8]
        with pytest.raises(ValueError, match="outside the vocabulary"):
            llm.generate([[3, 10**6]], GREEDY)
        again = llm.generate([[3, 4, 5]], GREEDY)[0]["token_ids"]
        assert again == hf_greedy("tiny-llama", [3, 4, 5], GREEDY.max_tokens), "the group serves after a refusal"
        kill_rank_1_and_expect_a_quick_error(llm)
        with pytest.raises(RuntimeError, match="shut down"):
            llm.generate([[3, 4, 5]], GREEDY)
    finally:
        llm.shutdown()


# ----------------------------------------------------------------------------- on 2+ GPUs (make test-gpu)
@pytest.mark.gpu
@pytest.mark.stubs("split_heads", "shard_weight", "receive_work", "LinearRowParallel.forward",
                   "VocabParallelEmbedding.forward", "ParallelLMHead.forward")
def test_tp2_on_nccl_matches_tp1_on_the_gpu():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs for NCCL tensor parallelism, {torch.cuda.device_count()} visible")
    name, config = "tiny-llama", dict(GROUP_CONFIG, dtype="float32")
    llm = LLM(model_path(name), tp_size=2, **config)
    try:
        got = run_workload(llm, name)
    finally:
        llm.shutdown()
    want = run_workload(LLM(model_path(name), **config), name)
    assert got == want, "tp=2 on NCCL differs from tp=1 on one GPU"
    for call, outs in zip(workload(name), got):
        for ids, out in zip(call, outs):
            assert out == hf_greedy(name, ids, GREEDY.max_tokens), "tp=2 on NCCL: not HF greedy"


@pytest.mark.gpu
@pytest.mark.stubs("split_heads", "shard_weight", "receive_work", "LinearRowParallel.forward",
                   "VocabParallelEmbedding.forward", "ParallelLMHead.forward")
def test_tp2_in_bf16_matches_tp1_up_to_hfs_first_near_tie():
    """bf16 sums split over two ranks round differently from one rank's: tokens are compared with TP=1 and HF
    bf16 up to HF's first step whose two best logits are closer than BF16_MARGIN (chapter 18's rule)."""
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs for NCCL tensor parallelism, {torch.cuda.device_count()} visible")
    name, config = "tiny-llama", dict(GROUP_CONFIG, dtype="bfloat16", attention_backend="triton")
    prompts = [ids for call in workload(name) for ids in call]
    params = SamplingParams(max_tokens=GREEDY.max_tokens, ignore_eos=True)
    llm = LLM(model_path(name), tp_size=2, **config)
    try:
        tp2 = [o["token_ids"] for o in llm.generate(prompts, params)]
    finally:
        llm.shutdown()
    tp1 = [o["token_ids"] for o in LLM(model_path(name), **config).generate(prompts, params)]
    for ids, two, one in zip(prompts, tp2, tp1):
        want, gaps = hf_greedy_cuda(name, ids, GREEDY.max_tokens, torch.bfloat16)
        sure = next((i for i, gap in enumerate(gaps) if gap < BF16_MARGIN), len(gaps))
        assert two[:sure] == one[:sure] == want[:sure], f"bf16 tokens differ before HF's first near-tie (step {sure})"


@pytest.mark.gpu
@pytest.mark.stubs("receive_work")
def test_a_killed_rank_on_the_gpu_ends_the_group_quickly():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs for NCCL tensor parallelism, {torch.cuda.device_count()} visible")
    llm = LLM(model_path("tiny-llama"), tp_size=2, **dict(GROUP_CONFIG, dtype="float32"))
    try:
        assert llm.generate([[3, 4, 5]], GREEDY)[0]["token_ids"] == hf_greedy("tiny-llama", [3, 4, 5],
                                                                               GREEDY.max_tokens)
        kill_rank_1_and_expect_a_quick_error(llm)
    finally:
        llm.shutdown()
