"""Chapter 20: mixture of experts. Routing against a float64 softmax; the torch loop, the grouped torch version
and the Triton fused-MoE kernel against a float64 per-token computation; the block layout against a brute-force
one; the expert weights stacked from the checkpoint; the MoE layer split over 2 gloo ranks; and whole LLMs on
tiny-qwen3-moe (paged, radix, chunked prefill, overlap; the fused kernel; tensor parallel 2) against HF greedy.
On a CPU the kernel runs in Triton's interpreter; the tests marked anydevice run on CUDA under `make test-gpu`."""

from __future__ import annotations

import dataclasses
import os
import random
from functools import lru_cache

import pytest
import torch
import torch.nn.functional as F

ON_CUDA = torch.cuda.is_available()
if not ON_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run in its numpy interpreter

from helpers import HAS_TRITON, assert_clean, hf_greedy, model_path, needs_triton, tokenizer  # noqa: E402
from minisgl import env  # noqa: E402
from minisgl.core import SamplingParams  # noqa: E402
from minisgl.distributed import get_tp_info  # noqa: E402
from minisgl.distributed.launch import run_on_ranks  # noqa: E402
from minisgl.layers.moe import MoELayer  # noqa: E402
from minisgl.llm import LLM  # noqa: E402
from minisgl.models import ModelConfig, load_model  # noqa: E402
from minisgl.models.weight import stack_expert_weights  # noqa: E402
from minisgl.moe import moe_align_block_size, moe_grouped, moe_reference, select_experts  # noqa: E402
from minisgl.moe.fused import fused_moe  # noqa: E402

DEVICE = torch.device("cuda" if ON_CUDA else "cpu")
MODEL = "tiny-qwen3-moe"
ENGINE_STUBS = ("select_experts", "moe_grouped", "stack_expert_weights", "MoELayer.forward")
KERNEL_STUBS = ("moe_align_block_size", "_fused_moe_kernel")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double().cpu() - want.double().cpu()).norm() / want.double().cpu().norm()).item()


# ----------------------------------------------------------------------------- float64 references
def softmax_topk64(logits: torch.Tensor, k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Row by row in Python: softmax in float64, experts sorted by probability."""
    weights, ids = [], []
    for row in logits.double().tolist():
        peak = max(row)
        exp = [pow(2.718281828459045, v - peak) for v in row]
        probs = [v / sum(exp) for v in exp]
        best = sorted(range(len(row)), key=lambda e: -probs[e])[:k]
        kept = [probs[e] for e in best]
        total = sum(kept) if renormalize else 1.0
        weights.append([p / total for p in kept])
        ids.append(best)
    return torch.tensor(weights, dtype=torch.float64), torch.tensor(ids)


def moe64(x, w_gate_up, w_down, weights, ids) -> torch.Tensor:
    """Token by token, expert by expert, in float64: sum_k weights[t, k] * down(silu(gate x) * up x)."""
    x, w_gate_up, w_down = x.double().cpu(), w_gate_up.double().cpu(), w_down.double().cpu()
    inter = w_down.shape[2]
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            h = w_gate_up[e] @ x[t]
            out[t] += float(weights[t, k]) * (w_down[e] @ (F.silu(h[:inter]) * h[inter:]))
    return out


def moe_case(tokens: int, hidden: int, inter: int, experts: int, top_k: int, seed: int, skew: bool = False):
    """Inputs of one MoE layer. skew: the router favours experts 0 and 1, so some experts get no token at all."""
    g = gen(seed)
    x = torch.randn(tokens, hidden, generator=g)
    w_gate_up = torch.randn(experts, 2 * inter, hidden, generator=g) / hidden**0.5
    w_down = torch.randn(experts, hidden, inter, generator=g) / inter**0.5
    logits = torch.randn(tokens, experts, generator=g)
    if skew:
        logits[:, :2] += 3.0
        logits[:, experts // 2:] -= 6.0
    weights, ids = softmax_topk64(logits, top_k, renormalize=True)
    return x, w_gate_up, w_down, weights.float(), ids


# ----------------------------------------------------------------------------- the config
def test_config_reads_the_moe_fields():
    # Qwen3-30B-A3B's numbers, with one dense layer and a sparse step added to exercise both rules.
    cfg = dict(architectures=["Qwen3MoeForCausalLM"], num_hidden_layers=6, hidden_size=2048, intermediate_size=6144,
               num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936, num_experts=128,
               num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True, mlp_only_layers=[3],
               decoder_sparse_step=2)
    mc = ModelConfig.from_dict(cfg)
    assert (mc.num_experts, mc.num_experts_per_tok, mc.moe_intermediate_size, mc.norm_topk_prob) == (128, 8, 768, True)
    assert mc.moe_layers == (1, 5), f"sparse: every 2nd layer (1, 3, 5) but mlp_only_layers [3]; got {mc.moe_layers}"
    tiny = ModelConfig.from_path(model_path(MODEL))  # transformers 5 saves num_experts as num_local_experts
    assert (tiny.num_experts, tiny.num_experts_per_tok, tiny.moe_layers) == (8, 2, (0, 1)), tiny
    dense = ModelConfig.from_path(model_path("tiny-qwen3"))
    assert dense.num_experts == 0 and dense.moe_layers == (), "a dense model has no MoE layers"


# ----------------------------------------------------------------------------- routing
@pytest.mark.stubs("select_experts")
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("experts, top_k", [(8, 2), (16, 4), (5, 1)])
def test_select_experts_is_softmax_then_top_k(experts, top_k, renormalize):
    logits = 3 * torch.randn(23, experts, generator=gen(experts + top_k))
    weights, ids = select_experts(logits, top_k, renormalize)
    want_w, want_ids = softmax_topk64(logits, top_k, renormalize)
    assert weights.dtype == torch.float32, f"routing weights are float32, got {weights.dtype}"
    assert tuple(ids.shape) == (23, top_k) and torch.equal(ids.long(), want_ids), "the top_k experts, best first"
    assert torch.allclose(weights.double(), want_w, rtol=1e-5, atol=1e-7), (
        "weights: softmax over ALL experts, then the top_k kept" + (" and rescaled to sum to 1" if renormalize
                                                                      else " as they are (no renormalisation)"))


@pytest.mark.stubs("select_experts")
def test_select_experts_computes_in_float32_from_bf16_logits():
    logits = torch.randn(9, 8, generator=gen(3)).to(torch.bfloat16)
    weights, ids = select_experts(logits, 2, True)
    want_w, want_ids = softmax_topk64(logits.float(), 2, True)
    assert weights.dtype == torch.float32, f"weights are {weights.dtype}: the softmax is taken in float32"
    assert torch.equal(ids.long(), want_ids), f"experts chosen {ids.tolist()}, expected {want_ids.tolist()}"
    assert torch.allclose(weights.double(), want_w, rtol=1e-5), "softmax of bf16 logits must be taken in float32"


# ----------------------------------------------------------------------------- the torch experts
TORCH_CASES = [  # tokens, hidden, inter, experts, top_k, skew
    (29, 32, 24, 8, 2, False),
    (41, 48, 16, 8, 3, True),  # skewed routing: experts 4..7 get no token
    (1, 32, 24, 16, 4, False),  # one decode token
]


@pytest.mark.stubs("moe_reference")
@pytest.mark.parametrize("case", TORCH_CASES)
def test_moe_reference_equals_float64(case):
    x, w_gate_up, w_down, weights, ids = moe_case(*case[:5], seed=case[0], skew=case[5])
    got = moe_reference(x, w_gate_up, w_down, weights, ids)
    want = moe64(x, w_gate_up, w_down, weights, ids)
    assert got.dtype == x.dtype and got.shape == x.shape, f"{got.dtype} {tuple(got.shape)}"
    assert rel_err(got, want) < 1e-5, f"loop over experts vs float64: rel error {rel_err(got, want):.2e}"


@pytest.mark.stubs("moe_grouped")
@pytest.mark.parametrize("case", TORCH_CASES)
def test_moe_grouped_equals_float64(case):
    x, w_gate_up, w_down, weights, ids = moe_case(*case[:5], seed=case[0] + 1, skew=case[5])
    got = moe_grouped(x, w_gate_up, w_down, weights, ids)
    want = moe64(x, w_gate_up, w_down, weights, ids)
    assert got.dtype == x.dtype and got.shape == x.shape, f"{got.dtype} {tuple(got.shape)}"
    assert rel_err(got, want) < 1e-5, f"grouped experts vs float64: rel error {rel_err(got, want):.2e}"


# ----------------------------------------------------------------------------- block layout
def brute_layout(ids: torch.Tensor, experts: int, block: int) -> tuple[list[list[int]], list[int]]:
    """Per expert, its entries (in entry order) padded to whole blocks; and the expert of every block."""
    flat = ids.flatten().tolist()
    runs, owners = [], []
    for e in range(experts):
        entries = [i for i, v in enumerate(flat) if v == e]
        padded = entries + [len(flat)] * (-len(entries) % block)
        runs.append(padded)
        owners += [e] * (len(padded) // block)
    return runs, owners


@pytest.mark.anydevice
@pytest.mark.stubs("moe_align_block_size")
@pytest.mark.parametrize("tokens, experts, top_k, block",
                         [(29, 8, 2, 4), (41, 8, 3, 16), (1, 16, 4, 16), (16, 4, 2, 8)])
def test_align_lays_entries_out_by_expert_in_whole_blocks(tokens, experts, top_k, block):
    _, _, _, _, ids = moe_case(tokens, 8, 8, experts, top_k, seed=tokens, skew=tokens == 41)
    sorted_ids, expert_ids, num_padded = moe_align_block_size(ids.to(DEVICE), experts, block)
    runs, owners = brute_layout(ids, experts, block)
    n, used = ids.numel(), sum(len(r) for r in runs)
    bound = -(-(n + experts * (block - 1)) // block) * block
    assert sorted_ids.numel() == bound and expert_ids.numel() == bound // block, (
        f"static shapes: {bound} rows in {bound // block} blocks, got {sorted_ids.numel()} and {expert_ids.numel()}")
    assert num_padded.tolist() == [used], f"the runs end at row {used}, got {num_padded.tolist()}"
    layout = sorted_ids.cpu().tolist()
    start = 0
    for e, run in enumerate(runs):
        got = layout[start:start + len(run)]
        assert sorted(got) == sorted(run), f"expert {e}: rows {start}..{start + len(run)} hold {got}, want {run}"
        start += len(run)
    assert layout[used:] == [n] * (bound - used), "rows after the last run hold the padding value (no entry)"
    assert expert_ids.cpu().tolist() == owners + [-1] * (bound // block - len(owners)), "the expert of every block"


# ----------------------------------------------------------------------------- the Triton kernel
def aligned_inputs(ids: torch.Tensor, experts: int, block: int):
    """The layout moe_align_block_size makes, built here by brute force (so the kernel is tested on its own)."""
    runs, owners = brute_layout(ids, experts, block)
    rows = [i for run in runs for i in run]
    bound = -(-(ids.numel() + experts * (block - 1)) // block) * block
    sorted_ids = torch.tensor(rows + [ids.numel()] * (bound - len(rows)), dtype=torch.int32)
    expert_ids = torch.tensor(owners + [-1] * (bound // block - len(owners)), dtype=torch.int32)
    return sorted_ids.to(DEVICE), expert_ids.to(DEVICE), torch.tensor([len(rows)], dtype=torch.int32).to(DEVICE)


# Triton's interpreter converts float32 to bfloat16 by truncation (a GPU rounds to nearest), so bf16 on CUDA only.
KERNEL_DTYPES = [(torch.float32, 1e-5), (torch.float16, 3e-3)] + ([(torch.bfloat16, 2e-2)] if ON_CUDA else [])


@pytest.mark.anydevice
@pytest.mark.stubs("_fused_moe_kernel")
@pytest.mark.parametrize("dtype, tol", KERNEL_DTYPES)
@pytest.mark.parametrize("tokens, hidden, inter, experts, top_k, block", [
    (29, 40, 48, 8, 2, 16),  # hidden 40: K is not a multiple of BLOCK_K; 2 * 48 = 96 columns: two N tiles
    (3, 32, 16, 8, 2, 16),  # decode-sized: most blocks are padding or unused
])
@needs_triton
def test_grouped_gemm_kernel_equals_float64(tokens, hidden, inter, experts, top_k, block, dtype, tol):
    from minisgl.kernel.triton.fused_moe import grouped_gemm

    x, w_gate_up, _, weights, ids = moe_case(tokens, hidden, inter, experts, top_k, seed=tokens, skew=True)
    layout = aligned_inputs(ids, experts, block)
    xd, wd = x.to(DEVICE, dtype), w_gate_up.to(DEVICE, dtype)
    gate_up = grouped_gemm(xd, wd, *layout, rows_per_input=top_k, block_m=block)
    entry_rows = x.double()[torch.arange(tokens * top_k) // top_k]
    want = torch.einsum("nk,nok->no", entry_rows, w_gate_up.double()[ids.flatten()])
    assert gate_up.dtype == dtype and tuple(gate_up.shape) == (tokens * top_k, 2 * inter), tuple(gate_up.shape)
    err = rel_err(gate_up, want)
    assert err < tol, f"{dtype}: entry e must read token e // top_k: rel error {err:.2e}"
    # The second projection's form: one input row per entry, each output row scaled by its routing weight.
    scaled = grouped_gemm(xd[:, :hidden].repeat_interleave(top_k, 0).contiguous(), wd, *layout, rows_per_input=1,
                          block_m=block, route_weights=weights.flatten().to(DEVICE), out_dtype=torch.float32)
    want_scaled = want * weights.double().flatten()[:, None]
    assert scaled.dtype == torch.float32, "out_dtype is honoured"
    assert rel_err(scaled, want_scaled) < tol, f"{dtype}: routing weights: rel error {rel_err(scaled, want_scaled):.2e}"


@needs_triton
@pytest.mark.anydevice
@pytest.mark.stubs(*KERNEL_STUBS)
@pytest.mark.parametrize("dtype, tol", KERNEL_DTYPES)
def test_fused_moe_equals_float64(dtype, tol):
    x, w_gate_up, w_down, weights, ids = moe_case(37, 64, 48, 8, 2, seed=20, skew=False)
    got = fused_moe(x.to(DEVICE, dtype), w_gate_up.to(DEVICE, dtype), w_down.to(DEVICE, dtype),
                    weights.to(DEVICE), ids.to(DEVICE), block_m=16)
    want = moe64(x, w_gate_up, w_down, weights, ids)
    assert got.dtype == dtype and got.shape == x.shape
    assert rel_err(got, want) < tol, f"fused MoE ({dtype}) vs float64: rel error {rel_err(got, want):.2e}"


# ----------------------------------------------------------------------------- the checkpoint's experts
@pytest.mark.stubs("stack_expert_weights")
def test_stack_expert_weights_stacks_by_expert_number_in_any_order():
    g = gen(5)
    names = [f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight" for layer in (0, 1) for e in range(4)
             for proj in ("gate_up_proj", "down_proj")]
    tensors = {n: torch.randn(6, 3, generator=g) for n in names}
    tensors["model.layers.0.mlp.gate.weight"] = torch.randn(4, 3, generator=g)  # the router passes through
    order = list(tensors)
    random.Random(0).shuffle(order)  # experts arrive out of order, layers interleaved
    out = dict(stack_expert_weights(((n, tensors[n]) for n in order), num_experts=4))
    assert set(out) == {f"model.layers.{layer}.mlp.experts.{proj}" for layer in (0, 1)
                        for proj in ("gate_up_proj", "down_proj")} | {"model.layers.0.mlp.gate.weight"}, sorted(out)
    for layer in (0, 1):
        for proj in ("gate_up_proj", "down_proj"):
            want = torch.stack([tensors[f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"] for e in range(4)])
            assert torch.equal(out[f"model.layers.{layer}.mlp.experts.{proj}"], want), (
                f"layer {layer} {proj}: expert e must sit at index e, whatever the arrival order")


@pytest.mark.stubs("stack_expert_weights")
def test_stack_expert_weights_refuses_missing_or_unknown_experts():
    w = torch.zeros(2, 2)
    three_of_four = [(f"model.layers.0.mlp.experts.{e}.down_proj.weight", w) for e in (0, 1, 3)]
    with pytest.raises(ValueError, match="missing experts"):
        dict(stack_expert_weights(iter(three_of_four), num_experts=4))
    with pytest.raises(ValueError, match="expert 4"):
        dict(stack_expert_weights(iter([("model.layers.0.mlp.experts.4.down_proj.weight", w)]), num_experts=4))


@pytest.mark.stubs("stack_expert_weights")
def test_the_fixtures_experts_load_into_stacked_weights():
    from safetensors.torch import load_file

    model, config = load_model(model_path(MODEL))
    saved = load_file(str(model_path(MODEL) / "model.safetensors"))
    experts = model.model.layers[1].mlp.experts
    for e in range(config.num_experts):
        p = f"model.layers.1.mlp.experts.{e}."
        gate_up = torch.cat([saved[p + "gate_proj.weight"], saved[p + "up_proj.weight"]])
        assert torch.equal(experts.gate_up_proj[e], gate_up), f"expert {e}: rows [gate | up] of its own weights"
        assert torch.equal(experts.down_proj[e], saved[p + "down_proj.weight"]), f"expert {e}: down_proj"


# ----------------------------------------------------------------------------- the layer, on 1 and 2 ranks
HIDDEN, INTER, EXPERTS, TOP_K = 32, 24, 8, 2


def layer_inputs():
    x, w_gate_up, w_down, _, _ = moe_case(13, HIDDEN, INTER, EXPERTS, TOP_K, seed=7)
    logits = 2 * torch.randn(13, EXPERTS, generator=gen(8))
    return x, w_gate_up, w_down, logits


def rank_moe_layer() -> torch.Tensor | BaseException:
    """In each rank: a MoELayer holding this rank's slice of every expert's intermediate dimension."""
    try:
        info, (x, w_gate_up, w_down, logits) = get_tp_info(), layer_inputs()
        layer = MoELayer(EXPERTS, TOP_K, HIDDEN, INTER, renormalize=True)
        mine = lambda t, dim: t.chunk(info.size, dim=dim)[info.rank]  # noqa: E731
        gate, up = w_gate_up.chunk(2, dim=1)
        layer.gate_up_proj = torch.cat([mine(gate, 1), mine(up, 1)], dim=1)  # each rank: [its gate | its up]
        layer.down_proj = mine(w_down, 2).contiguous()
        return layer(x, logits)
    except Exception as e:  # noqa: BLE001 - handed back to the test, which raises it
        return e


@lru_cache(maxsize=1)
def two_rank_results() -> list:
    return run_on_ranks(rank_moe_layer, 2)


@pytest.mark.stubs("MoELayer.forward")
@pytest.mark.parametrize("tp", [1, 2])
def test_moe_layer_routes_and_sums_over_ranks(tp):
    x, w_gate_up, w_down, logits = layer_inputs()
    weights, ids = softmax_topk64(logits, TOP_K, renormalize=True)
    want = moe64(x, w_gate_up, w_down, weights, ids)
    results = [rank_moe_layer()] if tp == 1 else two_rank_results()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    assert all(torch.equal(results[0], r) for r in results), "every rank must end with the same sum"
    assert rel_err(results[0], want) < 1e-5, f"MoE layer on {tp} rank(s) vs float64: {rel_err(results[0], want):.2e}"


@pytest.mark.stubs("MoELayer.forward")
def test_moe_layer_honours_renormalize():
    x, w_gate_up, w_down, logits = layer_inputs()
    layer = MoELayer(EXPERTS, TOP_K, HIDDEN, INTER, renormalize=False)
    layer.gate_up_proj, layer.down_proj = w_gate_up, w_down
    weights, ids = softmax_topk64(logits, TOP_K, renormalize=False)
    want = moe64(x, w_gate_up, w_down, weights, ids)
    got = layer(x, logits)
    assert rel_err(got, want) < 1e-5, f"renormalize=False: the kept probabilities as they are ({rel_err(got, want):.2e})"


def test_moe_layer_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="top_k"):
        MoELayer(4, 5, HIDDEN, INTER, renormalize=True)


# ----------------------------------------------------------------------------- whole LLMs against HF greedy
GREEDY = SamplingParams(max_tokens=10, ignore_eos=True)
# page_size 2 (paged), a prefill budget of 12 tokens (the long prompt is chunked), the radix cache (call 3's
# prompts extend call 1's) and the overlap scheduler (the default on the CPU).
LLM_CONFIG = dict(max_running_reqs=4, max_seq_len=160, num_pages=400, page_size=2, max_extend_tokens=12)
LONG = "A mixture of experts sends every token through only a few of its many feed-forward networks, chosen per token."


def workload() -> list[list[list[int]]]:
    tok = tokenizer(MODEL)
    first = [tok.encode(t) for t in ("The router picks two experts for every token", "Paged memory")]
    return [first, [tok.encode(LONG)], [first[0] + tok.encode(" and then"), first[1] + tok.encode(" is")]]


def run_workload(llm: LLM) -> list[list[list[int]]]:
    return [[o["token_ids"] for o in llm.generate(call, GREEDY)] for call in workload()]


@pytest.mark.stubs(*ENGINE_STUBS)
def test_llm_on_tiny_qwen3_moe_matches_hf_greedy():
    llm = LLM(model_path(MODEL), **LLM_CONFIG)
    assert llm.scheduler.config.overlap, "the overlap scheduler should be on (MINISGL_DISABLE_OVERLAP_SCHEDULING unset?)"
    for c, call in enumerate(workload()):
        if c == 2:
            cached = llm.scheduler.cache_manager.prefix_cache.match_prefix(call[0])[0].cached_len
            assert cached >= 8, f"call 3 should reuse call 1's prompt from the radix cache, {cached} tokens matched"
        outs = [o["token_ids"] for o in llm.generate(call, GREEDY)]
        if c == 1:
            prefills = sum(phase == "prefill" for phase, _ in llm.scheduler.history)
            assert prefills > 2, f"the long prompt should be prefilled in several chunks, not {prefills}"
        for i, (ids, out) in enumerate(zip(call, outs)):
            assert out == hf_greedy(MODEL, ids, GREEDY.max_tokens), f"call {c} prompt {i}: not HF greedy"
    assert_clean(llm)


@needs_triton
@pytest.mark.stubs(*ENGINE_STUBS[:1], *KERNEL_STUBS, "stack_expert_weights", "MoELayer.forward")
def test_llm_with_the_fused_kernel_matches_hf_greedy(monkeypatch):
    # MINISGL_FUSED_KERNELS=on: CPU tensors go through the Triton kernels (interpreter), chapter 19's switch.
    monkeypatch.setattr(env, "ENV", dataclasses.replace(env.ENV, FUSED_KERNELS="on"))
    llm = LLM(model_path(MODEL), **dict(LLM_CONFIG, max_extend_tokens=64))
    prompts = workload()[0]
    outs = [o["token_ids"] for o in llm.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True))]
    for ids, out in zip(prompts, outs):
        assert out == hf_greedy(MODEL, ids, 4), "fused MoE kernel in the engine: not HF greedy"
    assert_clean(llm)


@pytest.mark.stubs(*ENGINE_STUBS)
def test_tensor_parallel_moe_llm_matches_hf_greedy():
    llm = LLM(model_path(MODEL), tp_size=2, **LLM_CONFIG)
    try:
        got = run_workload(llm)
    finally:
        llm.shutdown()
    for c, (call, outs) in enumerate(zip(workload(), got)):
        for i, (ids, out) in enumerate(zip(call, outs)):
            assert out == hf_greedy(MODEL, ids, GREEDY.max_tokens), f"tp=2, call {c} prompt {i}: not HF greedy"


# ----------------------------------------------------------------------------- the benchmark script
@pytest.mark.stubs("select_experts", "moe_reference", "moe_grouped", *KERNEL_STUBS)
def test_the_benchmark_runs_at_toy_size(tmp_path):
    """The H200 benchmark's command (benchmark/moe.py, the harness beside the package) on a CPU with --tiny: all
    three forms (Triton in its interpreter; the first two where Triton is missing), checked against the loop,
    written to JSON and a plot."""
    import json

    from benchmark.moe import main as bench

    assert bench(["--tiny", "--out", str(tmp_path), "--tokens", "1", "5"]) == 0
    record = json.loads((tmp_path / "moe_bench.json").read_text())
    want = ["loop", "grouped"] + (["fused"] if HAS_TRITON else [])  # the fused form runs where Triton does
    assert record["methods"] == want, f"methods {record['methods']}, expected {want}"
    assert [r["tokens"] for r in record["rows"]] == [1, 5]
    for row in record["rows"]:
        for m in record["methods"]:
            assert row[f"{m}_rel_err"] < 1e-5 and row[f"{m}_s"] > 0, (m, row)
        assert row["flops"] == 2 * row["tokens"] * 2 * 3 * 64 * 32, "2 x tokens x top_k x 3 x hidden x inter"
    assert (tmp_path / "moe_bench.png").stat().st_size > 0


# ----------------------------------------------------------------------------- on a GPU (make test-gpu)
@pytest.mark.gpu
@pytest.mark.stubs(*ENGINE_STUBS[:1], *KERNEL_STUBS, "stack_expert_weights", "MoELayer.forward")
def test_llm_on_the_gpu_with_cuda_graphs_matches_hf_greedy():
    """float32 on CUDA: the fused kernel (auto picks it for CUDA tensors) and CUDA graphs for decode."""
    llm = LLM(model_path(MODEL), device="cuda", dtype="float32", cuda_graph_max_bs=4, **LLM_CONFIG)
    got = run_workload(llm)
    for c, (call, outs) in enumerate(zip(workload(), got)):
        for i, (ids, out) in enumerate(zip(call, outs)):
            assert out == hf_greedy(MODEL, ids, GREEDY.max_tokens), f"CUDA, call {c} prompt {i}: not HF greedy"
    assert_clean(llm)
