"""Chapter 30: quantization. The formats first, each against its own error bound computed in float64: per-channel
INT8 (half a step of the row's scale per element), e4m3 FP8 (a relative 2^-4, 2^-10 of the scale below the normal
range, +-448 at most), the INT8 and FP8 multiplies against float64 with bounds derived from those, and the FP8 KV
pool's write and read. Then SmolLM2 on a fixed text shipped in the repository (tools/data/corpus.txt): its logits,
top-1 agreement and perplexity with quantized linear layers against float32, within bounds stated below (measured
on the reference, with a margin); the engine with each option against Hugging Face float32's next token over the
same text; the KV pool's page count doubling at equal memory; bad flags refused by name. Then pre-quantized
checkpoints in the compressed-tensors format, written by compressed-tensors itself (tools/prequant.py): greedy
tokens equal to HF transformers' on the same checkpoint, the loaded codes and scales equal to the files' bit for bit
and to the chapter's own quantization, unsupported schemes refused naming the config field, the flag's default,
tensor parallel slices, SmolLM2 within the engine's bounds.

Measured on the reference (SmolLM2-135M, the first 192 tokens of the corpus, float32 = 1.0), 2 threads: int8wo
logits relative error 0.023, top-1 0.964, perplexity x1.015; fp8 0.062, 0.901, x1.038; fp8-tensor 0.058, 0.932,
x1.016. FP8's per-token activation rounding moves with the last bits of float32 sums: on 1 thread fp8 measured
0.064, 0.875, x1.060, so its bounds cover both.
"""

from __future__ import annotations

import copy
import json
import math
import os
from functools import lru_cache
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # before triton is imported: on a CPU the Triton backend runs in its interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

from helpers import ROOT, needs_triton, assert_clean, hf_greedy, hf_logits, hf_model, model_or_skip, model_path, prompt_ids, tokenizer
from minisgl.core import SamplingParams
from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.llm import LLM
from minisgl.quant import FP8_MAX, fp8_linear, fp8_scale, int8_linear, quantize_fp8, quantize_int8_per_channel

ALL = ("quantize_int8_per_channel", "int8_linear", "quantize_fp8", "MHAKVCache.store_kv")
E4M3_REL = 2.0**-4  # 3 mantissa bits: round to nearest is off by at most half a step, 2^-4 of the value
E4M3_SUB = 2.0**-10  # below 2^-6 (subnormals) the step is 2^-9: half of it, absolutely, times the scale
TEXT_TOKENS = 192
# Per method: (logits relative error below, top-1 agreement at least, perplexity ratio at most). Measured values in
# the module's docstring; each bound leaves a margin for other CPUs' kernels and nothing more.
QUALITY = {"int8wo": (0.04, 0.93, 1.03), "fp8": (0.09, 0.84, 1.08), "fp8-tensor": (0.09, 0.88, 1.04)}


def weights(rows: int = 48, cols: int = 80, seed: int = 0) -> torch.Tensor:
    """Rows of very different ranges (as real layers have), one row that reaches its range at a negative value."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * torch.logspace(-3, 1, rows)[:, None]
    w[3, 7] = -w[3].abs().max() * 1.5
    w[5] = 0.0  # an all-zero row
    return w


def first_bad(err: torch.Tensor, bound: torch.Tensor) -> tuple[int, int] | None:
    bad = (err > bound).nonzero()
    return None if not len(bad) else (int(bad[0, 0]), int(bad[0, 1]))


# --- INT8: per-channel quantize and the weight-only multiply ------------------------------------------------------

@pytest.mark.stubs("quantize_int8_per_channel")
def test_int8_scales_are_per_output_row_and_the_round_trip_is_within_half_a_step():
    w = weights()
    q, scale = quantize_int8_per_channel(w)
    assert q.dtype == torch.int8 and tuple(q.shape) == tuple(w.shape), f"q: {q.dtype} {tuple(q.shape)}"
    assert scale.dtype == torch.float32 and tuple(scale.shape) == (w.shape[0],), \
        f"one float32 scale per output row expected: got {scale.dtype} of shape {tuple(scale.shape)}"
    amax = w.abs().amax(dim=1)
    for r in (0, 3, 47):
        assert torch.isclose(scale[r], amax[r] / 127, rtol=1e-6), \
            f"row {r}: scale {float(scale[r]):.6g}, expected amax/127 = {float(amax[r] / 127):.6g}"
    assert scale[5] > 0, "an all-zero row needs a positive scale (no division by zero)"
    assert int(q.min()) >= -127 and int(q.max()) <= 127, f"symmetric range [-127, 127]: got [{int(q.min())}, " \
                                                         f"{int(q.max())}]"
    assert int(q[3, 7]) == -127, f"row 3's largest magnitude is negative: q = {int(q[3, 7])}, expected -127"
    err = (q.double() * scale.double()[:, None] - w.double()).abs()
    bound = scale.double()[:, None] / 2 * (1 + 1e-6)  # round to nearest: half a step, float32's own rounding aside
    bad = first_bad(err, bound)
    assert bad is None, (f"row {bad[0]}, column {bad[1]}: |w - q*scale| = {float(err[bad]):.3g} exceeds half a "
                         f"step {float(bound[bad]):.3g} (w = {float(w[bad]):.6g}, q = {int(q[bad])}): "
                         f"round to nearest, not toward zero")


@pytest.mark.stubs("int8_linear")
@pytest.mark.parametrize("rows", [6, 24], ids=["decode-sized (the CPU kernel)", "prefill-sized"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_int8_linear_equals_the_dequantized_multiply_in_float64(with_bias, rows):
    """The multiply against x (q*scale)^T + b in float64, on hand-made codes and scales (rows of very different
    scales). The CPU kernel takes bfloat16 activations and scales: each product is off by at most about 2^-8 of
    |x||w| relatively, hence the bound 2^-7 (|x| |W|^T + |b|)."""
    g = torch.Generator().manual_seed(1)
    q = torch.randint(-127, 128, (48, 80), generator=g, dtype=torch.int8)
    scale = torch.logspace(-5, -1, 48)
    x = torch.randn(2, rows // 2, q.shape[1], generator=g)
    bias = 4 + torch.randn(q.shape[0], generator=g) if with_bias else None
    y = int8_linear(x, q, scale, bias)
    assert tuple(y.shape) == (2, rows // 2, q.shape[0]) and y.dtype == x.dtype, f"y: {tuple(y.shape)} {y.dtype}"
    wd = q.double() * scale.double()[:, None]
    want = x.double() @ wd.t() + (bias.double() if with_bias else 0)
    bound = 2.0**-7 * (x.double().abs() @ wd.abs().t() + (bias.double().abs() if with_bias else 0)) + 1e-6
    err = (y.double() - want).abs()
    bad = (err > bound).nonzero()
    assert not len(bad), (f"row {tuple(bad[0][:2].tolist())}, output {int(bad[0][2])}: got {float(y[tuple(bad[0])]):.6g}, "
                          f"expected {float(want[tuple(bad[0])]):.6g} (bound {float(bound[tuple(bad[0])]):.3g}): the "
                          f"scale multiplies the product once, after the matmul; the bias is added unscaled")


# --- FP8 ----------------------------------------------------------------------------------------------------------

@pytest.mark.stubs("quantize_fp8")
def test_fp8_quantize_within_e4m3s_rounding_and_clamped_instead_of_nan():
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.randn(64, generator=g) * 100, torch.randn(64, generator=g) * 1e-3,
                   torch.tensor([500.0, -1000.0, 448.0, 0.0])]).reshape(4, -1)
    scale = torch.tensor([[0.5], [1.0], [2.0], [0.25]])
    q = quantize_fp8(x, scale)
    assert q.dtype == torch.float8_e4m3fn and tuple(q.shape) == tuple(x.shape), f"{q.dtype} {tuple(q.shape)}"
    back = q.double() * scale.double()
    assert not torch.isnan(back).any(), f"NaN at {back.isnan().nonzero()[0].tolist()}: clamp to +-448 before the cast"
    limit = FP8_MAX * scale.double()
    want = torch.maximum(torch.minimum(x.double(), limit), -limit)  # what e4m3 can hold
    bound = torch.maximum(E4M3_REL * want.abs(), E4M3_SUB * scale.double()) * (1 + 1e-6)
    bad = first_bad((back - want).abs(), bound)
    assert bad is None, (f"row {bad[0]} (scale {float(scale[bad[0]])}), element {bad[1]}: x = {float(x[bad]):.6g}, "
                         f"read back {float(back[bad]):.6g}, expected within {float(bound[bad]):.3g} of "
                         f"{float(want[bad]):.6g}")


@pytest.mark.stubs("quantize_fp8")
@pytest.mark.parametrize("per_row", [True, False], ids=["per-channel", "per-tensor"])
def test_fp8_linear_within_the_bound_of_two_e4m3_operands(per_row):
    """x and W both e4m3 (x per token, W per row or per tensor): each product is off by at most
    (1 + 2^-4)^2 - 1 < 0.13 of |x||w|, plus the subnormal floor, which these operands stay above."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(32, 64, generator=g)
    x = torch.randn(5, 64, generator=g) * 3
    ws = fp8_scale(w, per_row=per_row).flatten()
    qw = quantize_fp8(w, ws.reshape(-1, 1) if per_row else ws)
    assert tuple(ws.shape) == ((32,) if per_row else (1,))
    bias = torch.randn(32, generator=g)
    y = fp8_linear(x, qw, ws, bias)
    want = x.double() @ w.double().t() + bias.double()
    bound = 0.13 * (x.double().abs() @ w.double().abs().t()) + 1e-4
    bad = first_bad((y.double() - want).abs(), bound)
    assert bad is None, f"token {bad[0]}, output {bad[1]}: got {float(y[bad]):.6g}, expected {float(want[bad]):.6g}"


# --- the FP8 KV pool ----------------------------------------------------------------------------------------------

@pytest.mark.stubs("quantize_fp8", "MHAKVCache.store_kv")
def test_fp8_kv_pool_writes_divided_by_each_layers_scale_and_reads_back_within_e4m3():
    pool = MHAKVCache(num_kv_heads=2, head_dim=16, num_layers=2, num_pages=8, page_size=2, dtype=torch.float8_e4m3fn)
    assert pool.bytes_per_slot == 2 * 2 * 2 * 16, f"one byte per value: {pool.bytes_per_slot} bytes per slot"
    k_scales, v_scales = [0.05, 0.5], [0.2, 0.01]
    pool.set_scales(k_scales, v_scales)
    g = torch.Generator().manual_seed(4)
    slots = torch.tensor([3, 0, 9, 14])
    for layer in (0, 1):
        k = torch.randn(4, 32, generator=g) * 10 * k_scales[layer]
        v = torch.randn(4, 32, generator=g) * 10 * v_scales[layer]
        v[0, 0] = 600 * v_scales[layer]  # past e4m3's range at this scale: clamped to 448 x scale, not NaN
        pool.store_kv(k, v, slots, layer)
        for which, x, s, cache in (("k", k, k_scales[layer], pool.k_cache(layer)),
                                   ("v", v, v_scales[layer], pool.v_cache(layer))):
            raw = cache[slots].reshape(4, -1)
            assert raw.dtype == torch.float8_e4m3fn
            back = pool.dequantize(cache[slots], layer, which, torch.float32).reshape(4, -1).double()
            want = x.double().clamp(-FP8_MAX * s, FP8_MAX * s)
            bound = torch.maximum(E4M3_REL * want.abs(), torch.full_like(want, E4M3_SUB * s)) * (1 + 1e-6)
            bad = first_bad((back - want).abs(), bound)
            assert bad is None, (f"layer {layer} {which} (scale {s}), slot {int(slots[bad[0]])}, element {bad[1]}: "
                                 f"stored {float(x[bad]):.6g}, read back {float(back[bad]):.6g} (raw FP8 "
                                 f"{float(raw[bad].float()):.6g}; expected raw value / scale = {float(want[bad]) / s:.6g})")


def test_fp8_kv_doubles_the_pages_of_a_bfloat16_pool_at_equal_memory():
    counts = {}
    for kv in ("auto", "fp8_e4m3"):
        llm = LLM(model_path("tiny-qwen3"), dtype="bfloat16", kv_cache_dtype=kv, cpu_kv_cache_mb=1,
                  max_running_reqs=64, max_seq_len=512, overlap=False)
        counts[kv] = llm.engine.num_pages
        assert llm.engine.kv_cache.k_cache(0).dtype == (torch.bfloat16 if kv == "auto" else torch.float8_e4m3fn)
    assert counts["fp8_e4m3"] == 2 * counts["auto"], f"pages at 1 MB: {counts} (FP8 stores half the bytes)"


def test_bad_flags_are_refused_by_name():
    from minisgl.engine.config import EngineConfig
    from minisgl.server.args import parse_args

    path = model_path("tiny-qwen3")
    with pytest.raises(ValueError, match="quantization"):
        EngineConfig(path, quantization="int4")
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig(path, kv_cache_dtype="fp8_e5m2")
    assert "quantization" not in parse_args(["--model", str(path)]).engine_args, "off by default"
    args = parse_args(["--model", str(path), "--quantization", "int8wo", "--kv-cache-dtype", "fp8_e4m3"])
    assert args.engine_args["quantization"] == "int8wo" and args.engine_args["kv_cache_dtype"] == "fp8_e4m3"
    for flag, value in (("--quantization", "awq"), ("--kv-cache-dtype", "int8")):
        with pytest.raises(SystemExit):
            parse_args(["--model", str(path), flag, value])


# --- SmolLM2 on a fixed text --------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def text_ids() -> list[int]:
    text = (ROOT / "tools" / "data" / "corpus.txt").read_text()[:1500]
    return tokenizer("smollm2").encode(text)[:TEXT_TOKENS]


def quantized_hf(method: str):
    """A copy of the HF model whose decoder linear layers multiply through the chapter's functions (the LM head
    stays float32, as in the engine)."""
    model = copy.deepcopy(hf_model("smollm2"))
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and "lm_head" not in name:
            w = mod.weight.data
            if method == "int8wo":
                q, s = quantize_int8_per_channel(w)
                mod.forward = (lambda q, s, b: lambda x: int8_linear(x, q, s, b))(q, s, mod.bias)
            else:
                s = fp8_scale(w, per_row=method == "fp8").flatten()
                q = quantize_fp8(w, s.reshape(-1, 1) if method == "fp8" else s)
                mod.forward = (lambda q, s, b: lambda x: fp8_linear(x, q, s, b))(q, s, mod.bias)
    return model


def perplexity(logits: torch.Tensor, ids: list[int]) -> float:
    logp = torch.log_softmax(logits[:-1].double(), dim=-1)
    return math.exp(-float(logp.gather(1, torch.tensor(ids[1:])[:, None]).mean()))


@pytest.mark.stubs("quantize_int8_per_channel", "int8_linear", "quantize_fp8")
@pytest.mark.parametrize("method", list(QUALITY))
def test_smollm2_logits_top1_and_perplexity_within_the_methods_bounds(method):
    check_quality(quantized_hf(method), method, method)


def check_quality(model, method: str, label: str) -> None:
    """The model's logits over the text against HF float32's, within QUALITY[method]."""
    ids = text_ids()
    want = hf_logits("smollm2", ids)
    with torch.inference_mode():
        got = model(torch.tensor([ids])).logits[0].float()
    rel_bound, top1_bound, ppl_bound = QUALITY[method]
    rel = float((got - want).double().norm() / want.double().norm())
    top1 = float((got.argmax(-1) == want.argmax(-1)).double().mean())
    ratio = perplexity(got, ids) / perplexity(want, ids)
    assert rel < rel_bound and top1 >= top1_bound and ratio <= ppl_bound, (
        f"{label} over {len(ids)} tokens: logits relative error {rel:.4f} (bound {rel_bound}), top-1 agreement "
        f"{top1:.3f} (bound {top1_bound}), perplexity ratio {ratio:.4f} (bound {ppl_bound})")


# --- the engine ---------------------------------------------------------------------------------------------------

ENGINE_OPTIONS = {"int8wo": dict(quantization="int8wo"), "fp8": dict(quantization="fp8"),
                  "int8wo+fp8-kv": dict(quantization="int8wo", kv_cache_dtype="fp8_e4m3")}
# Next-token agreement with HF float32 over the text's 48 prefixes below. Measured on the reference: int8wo 1.000,
# fp8 0.938, fp8 KV alone 0.958, int8wo with fp8 KV 0.979.
ENGINE_TOP1 = {"int8wo": 0.92, "fp8": 0.85, "int8wo+fp8-kv": 0.9}
PREFIXES = range(TEXT_TOKENS - 48, TEXT_TOKENS)


@pytest.mark.stubs(*ALL)
@pytest.mark.parametrize("option", list(ENGINE_OPTIONS))
def test_engine_next_token_agrees_with_float32_over_the_text(option):
    """The engine with the option predicts the next token of each of 48 prefixes of the text (the prefixes share
    their KV through the radix cache, so most positions are read back from the pool): against HF float32's argmax."""
    ids = text_ids()
    want = hf_logits("smollm2", ids).argmax(-1)
    llm = LLM(model_path("smollm2"), max_running_reqs=8, max_seq_len=256, overlap=False, **ENGINE_OPTIONS[option])
    if "quantization" in ENGINE_OPTIONS[option]:
        proj = llm.engine.model.model.layers[0].mlp.down_proj
        assert proj.weight.element_size() == 1 and proj.weight_scale is not None, "the linear layers hold 8 bits"
        assert llm.engine.model.model.embed_tokens.weight.dtype == torch.float32, \
            "the embedding (SmolLM2's LM head too: tied) stays unquantized"
    outs = llm.generate([ids[:n] for n in PREFIXES], SamplingParams(max_tokens=1))
    got = [o["token_ids"][0] for o in outs]
    agree = sum(int(t == int(want[n - 1])) for t, n in zip(got, PREFIXES)) / len(got)
    assert agree >= ENGINE_TOP1[option], f"{option}: next-token agreement {agree:.3f} over {len(got)} prefixes, " \
                                         f"bound {ENGINE_TOP1[option]}"
    assert_clean(llm)


@pytest.mark.stubs("quantize_int8_per_channel", "int8_linear")
def test_tensor_parallel_ranks_quantize_their_own_slices():
    """tp_size 2 (gloo): each rank quantizes the rows (q/k/v, gate/up) or columns (o, down) it holds, a row-parallel
    rank scaling its partial sum before the all-reduce. The scales of the down and o projections then differ from
    one rank's (each covers half the inputs), so the greedy tokens are compared over their first 4 only (measured
    on the reference: the first 6 of every prompt agree)."""
    prompts = prompt_ids("tiny-qwen3", 3)
    config = dict(max_running_reqs=4, max_seq_len=128, overlap=False, quantization="int8wo")
    want = [o["token_ids"] for o in LLM(model_path("tiny-qwen3"), **config).generate(prompts, SamplingParams(max_tokens=4))]
    llm = LLM(model_path("tiny-qwen3"), tp_size=2, **config)
    try:
        got = [o["token_ids"] for o in llm.generate(prompts, SamplingParams(max_tokens=4))]
    finally:
        llm.shutdown()
    for i, (a, b) in enumerate(zip(got, want)):
        assert a == b, f"request {i}: tp_size 2 with int8wo {a}, tp_size 1 {b}"


def fp8_kv_llm(backend: str, device: str = "cpu", **kwargs) -> LLM:
    llm = LLM(model_path("tiny-qwen3"), max_running_reqs=4, max_seq_len=128, page_size=4, overlap=False,
              attention_backend=backend, kv_cache_dtype="fp8_e4m3", device=device, **kwargs)
    layers = llm.engine.model_config.num_layers
    # scales other than 1.0, different per layer and for keys and values: a scale used twice, never, or from the
    # wrong layer changes the answers
    llm.engine.kv_cache.set_scales([0.5 + 0.25 * i for i in range(layers)], [2.0 - 0.5 * i for i in range(layers)])
    return llm


@needs_triton
@pytest.mark.stubs("quantize_fp8", "MHAKVCache.store_kv")
def test_fp8_kv_with_the_triton_kernels_equals_the_torch_backend():
    """Both backends read the same FP8 bytes with per-layer scales (the Triton kernels convert in the kernel and take
    the scales outside the sums): the same greedy tokens on tiny-qwen3 (under Triton's CPU interpreter here)."""
    prompts = prompt_ids("tiny-qwen3", 3)
    outs = {}
    for backend in ("torch", "triton"):
        llm = fp8_kv_llm(backend)
        outs[backend] = [o["token_ids"] for o in llm.generate(prompts, SamplingParams(max_tokens=8))]
        assert_clean(llm)
    for i, (a, b) in enumerate(zip(outs["torch"], outs["triton"])):
        assert a == b, f"request {i}: torch backend {a}, triton backend {b}"


# --- pre-quantized checkpoints (compressed-tensors, written by tools/prequant.py) -----------------------------------

PREQUANT_SCHEMES = ("int8wo", "fp8", "fp8-tensor")
PREQUANT_TOKENS = 16


@pytest.fixture(scope="module")
def prequant(tmp_path_factory):
    """(model, scheme) -> a checkpoint folder written by compressed-tensors' compressor (made once per module)."""
    from tools.prequant import make_prequantized

    root, made = tmp_path_factory.mktemp("prequant"), {}

    def get(model: str, scheme: str) -> Path:
        if (model, scheme) not in made:
            made[model, scheme] = make_prequantized(model_path(model), root / f"{model}-{scheme}", scheme)
        return made[model, scheme]
    return get


@lru_cache(maxsize=2)
def hf_decompressed(folder: str):
    """HF transformers' own loader for the checkpoint (CompressedTensorsHfQuantizer), decompressed: codes times
    scales in float32, and for the FP8 schemes each Linear's input quantized per token as the config says."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=CompressedTensorsConfig(dequantize=True))
    return model.eval()


def hf_prequant_greedy(folder: Path, ids: list[int], n: int) -> list[int]:
    model = hf_decompressed(str(folder))
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, eos_token_id=None, pad_token_id=0,
                             temperature=None, top_p=None, top_k=None)
    return out[0, len(ids):].tolist()


def file_tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def file_codes(files: dict[str, torch.Tensor], layer: str) -> torch.Tensor:
    """A layer's codes as compressed-tensors itself reads them back (its own unpacking for pack-quantized)."""
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    if f"{layer}.weight_packed" in files:
        shape = torch.Size(files[f"{layer}.weight_shape"].tolist())
        return unpack_from_int32(files[f"{layer}.weight_packed"], 8, shape)
    return files[f"{layer}.weight"]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32)


@pytest.mark.stubs("int8_linear")
@pytest.mark.parametrize("model", ["tiny-qwen3", "tiny-llama"])
def test_an_int8wo_checkpoint_gives_hfs_greedy_tokens_on_it(prequant, model, monkeypatch):
    """The engine loads the checkpoint (no --quantization: the config says which method) and decodes greedily
    exactly what HF transformers decodes on the same checkpoint. HF multiplies by the decompressed weight in float32;
    the engine's INT8 kernel for decode-sized batches (torch._weight_int8pack_mm) takes its activations and scales
    in bfloat16, which moves tiny-llama's greedy path at its third token: here the multiply runs densely in float32
    (KERNEL_MAX_ROWS 0), and the next test checks the kernel path against the engine's own quantization.

    The FP8 schemes are not compared with HF token for token: each activation is rounded to 3 mantissa bits at
    every call, so a last-bit difference between two float32 sums (HF's and the engine's, or one thread and two)
    moves a code by a whole step, and greedy paths part at the next near-tie (measured: with 2 threads all 6 FP8
    decodes here agree with HF; with 1 thread tiny-llama fp8 parts from it on one prompt). They are compared exactly
    with the engine quantizing the same weights itself, and their codes and scales with the files, below."""
    scheme = "int8wo"
    import minisgl.quant.int8 as int8

    monkeypatch.setattr(int8, "KERNEL_MAX_ROWS", 0)
    folder = prequant(model, scheme)
    llm = LLM(folder, max_running_reqs=4, max_seq_len=128, overlap=False)
    assert llm.engine.config.quantization == scheme, \
        f"--quantization left out: the checkpoint's method {scheme!r} expected, got {llm.engine.config.quantization!r}"
    layer = llm.engine.model.model.layers[0]
    assert layer.mlp.down_proj.weight.element_size() == 1 and layer.self_attn.qkv_proj.weight_scale is not None
    prompts = prompt_ids(model, 3)
    outs = llm.generate(prompts, SamplingParams(max_tokens=PREQUANT_TOKENS, ignore_eos=True))
    for i, (ids, out) in enumerate(zip(prompts, outs)):
        want = hf_prequant_greedy(folder, ids, PREQUANT_TOKENS)
        assert out["token_ids"] == want, f"{model} {scheme}, prompt {i}: engine {out['token_ids']}, HF on the " \
                                         f"checkpoint {want}"
    assert_clean(llm)


# Per channel, a scale belongs to one output row wherever the row sits. Per tensor it does not: the checkpoint has one
# scale for each of q, k and v (HF's separate layers), the engine quantizing by itself one for the merged q/k/v. So
# the two paths hold the same numbers for int8wo and fp8 only.
SAME_AS_OWN = ("int8wo", "fp8")


@pytest.mark.stubs("int8_linear", "quantize_int8_per_channel", "quantize_fp8")
@pytest.mark.parametrize("scheme", SAME_AS_OWN)
@pytest.mark.parametrize("model", ["tiny-qwen3", "tiny-llama"])
def test_a_prequantized_checkpoint_decodes_as_the_engine_quantizing_the_same_weights(prequant, model, scheme):
    """With every default (the INT8 kernel on): the checkpoint loaded gives the tokens of --quantization on the
    float32 checkpoint, since the codes and scales are the same (test below) and so is every multiply."""
    prompts = prompt_ids(model, 3)
    params = SamplingParams(max_tokens=PREQUANT_TOKENS, ignore_eos=True)
    config = dict(max_running_reqs=4, max_seq_len=128, overlap=False)
    loaded = [o["token_ids"] for o in LLM(prequant(model, scheme), **config).generate(prompts, params)]
    own = [o["token_ids"] for o in LLM(model_path(model), quantization=scheme, **config).generate(prompts, params)]
    for i, (a, b) in enumerate(zip(loaded, own)):
        assert a == b, f"{model} {scheme}, prompt {i}: pre-quantized {a}, quantized by the engine {b}"


@pytest.mark.stubs("int8_linear", "quantize_fp8")
@pytest.mark.parametrize("scheme", PREQUANT_SCHEMES)
def test_loaded_codes_and_scales_are_the_files_bit_for_bit(prequant, scheme):
    """tiny-llama (untied LM head): every decoder layer's codes and scales as loaded (q/k/v and gate/up merged) equal
    the file's, read back by compressed-tensors' own code, and the layer's multiply uses them (against float64 with
    the file's dequantized weight, within the FP8 multiply's bound above); the LM head and the embedding stay float32
    and equal the file's float tensors (the config's ignore list keeps the LM head out of quantization)."""
    from minisgl.layers.linear import LinearReplicated
    from minisgl.models import load_model

    g = torch.Generator().manual_seed(3)

    folder = prequant("tiny-llama", scheme)
    files = file_tensors(folder)
    model, _ = load_model(folder)
    merged = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
    for i, block in enumerate(model.model.layers):
        for name, op in (("self_attn.qkv_proj", block.self_attn.qkv_proj), ("self_attn.o_proj", block.self_attn.o_proj),
                         ("mlp.gate_up_proj", block.mlp.gate_up_proj), ("mlp.down_proj", block.mlp.down_proj)):
            parent, leaf = name.split(".")
            parts = [f"model.layers.{i}.{parent}.{p}" for p in merged.get(leaf, (leaf,))]
            codes = torch.cat([file_codes(files, p) for p in parts])
            scales = torch.cat([files[f"{p}.weight_scale"].float().flatten().expand(file_codes(files, p).shape[0])
                                for p in parts])
            assert op.weight.dtype == codes.dtype, f"layer {i} {name}: loaded {op.weight.dtype}, file {codes.dtype}"
            assert torch.equal(bits(op.weight), bits(codes)), f"layer {i} {name}: codes differ from the file's"
            assert op.weight_scale.dtype == torch.float32 and torch.equal(bits(op.weight_scale), bits(scales)), \
                f"layer {i} {name}: scales {op.weight_scale[:4].tolist()} ..., file {scales[:4].tolist()} ..."
            x = torch.randn(3, codes.shape[1], generator=g)
            w = codes.double() * scales.double()[:, None]
            err = (LinearReplicated.forward(op, x).double() - x.double() @ w.t()).abs()
            bad = first_bad(err, 0.13 * (x.double().abs() @ w.abs().t()) + 1e-6)
            assert bad is None, f"layer {i} {name}: the multiply is off at row {bad[0]}, output {bad[1]}"
    assert model.lm_head.weight.dtype == torch.float32 and torch.equal(model.lm_head.weight, files["lm_head.weight"]), \
        "the LM head is ignored by the checkpoint's config: float32, the file's tensor"
    assert torch.equal(model.model.embed_tokens.weight, files["model.embed_tokens.weight"])


def test_int8_codes_written_naive_quantized_load_as_the_packed_ones(prequant, tmp_path):
    """compressed-tensors' other layout for INT8 weights, a plain int8 `weight` ("naive-quantized", forced here):
    the same codes and scales as the packed checkpoint's."""
    from minisgl.models import load_model
    from tools.prequant import make_prequantized

    naive = make_prequantized(model_path("tiny-qwen3"), tmp_path / "naive", "int8wo", "naive-quantized")
    config = json.loads((naive / "config.json").read_text())["quantization_config"]
    assert config["format"] == "naive-quantized" and "model.layers.0.mlp.down_proj.weight" in file_tensors(naive)
    a, _ = load_model(naive)
    b, _ = load_model(prequant("tiny-qwen3", "int8wo"))
    for i, (x, y) in enumerate(zip(a.model.layers, b.model.layers)):
        for name in ("qkv_proj", "o_proj"):
            p, q = getattr(x.self_attn, name), getattr(y.self_attn, name)
            assert torch.equal(p.weight, q.weight) and torch.equal(p.weight_scale, q.weight_scale), f"layer {i} {name}"
        assert torch.equal(x.mlp.gate_up_proj.weight, y.mlp.gate_up_proj.weight), f"layer {i} gate_up_proj"


@pytest.mark.stubs("quantize_int8_per_channel", "quantize_fp8")
@pytest.mark.parametrize("scheme", SAME_AS_OWN)
def test_the_checkpoints_codes_are_the_chapters_own(prequant, scheme):
    """compressed-tensors rounded the weights with the chapter's scales: the same codes and scales as the engine
    quantizing the float32 checkpoint itself (--quantization), so the two paths run the same numbers."""
    from minisgl.models import load_model
    from minisgl.quant.apply import quantize_linear_weights

    loaded, _ = load_model(prequant("tiny-qwen3", scheme))
    own, _ = load_model(model_path("tiny-qwen3"))
    quantize_linear_weights(own, scheme)
    for i, (a, b) in enumerate(zip(loaded.model.layers, own.model.layers)):
        for name in ("qkv_proj", "o_proj"):
            x, y = getattr(a.self_attn, name), getattr(b.self_attn, name)
            assert torch.equal(bits(x.weight), bits(y.weight)), f"layer {i} {name}: codes differ"
            assert torch.equal(x.weight_scale, y.weight_scale.expand_as(x.weight_scale)), \
                f"layer {i} {name}: scales differ"
        assert torch.equal(bits(a.mlp.down_proj.weight), bits(b.mlp.down_proj.weight)), f"layer {i} down_proj"


def write_config(folder: Path, base: Path, change) -> Path:
    config = json.loads((base / "config.json").read_text())
    change(config["quantization_config"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _group(qc: dict) -> dict:
    return qc["config_groups"]["group_0"]


# (name, which checkpoint, change to its quantization_config, the field the error must name)
REFUSED = [
    ("awq", "int8wo", lambda qc: qc.update(quant_method="awq"), "quant_method"),
    ("int4", "int8wo", lambda qc: _group(qc)["weights"].update(num_bits=4), "weights.num_bits"),
    ("group", "int8wo", lambda qc: _group(qc)["weights"].update(strategy="group", group_size=128),
     "weights.group_size"),
    ("asymmetric", "int8wo", lambda qc: _group(qc)["weights"].update(symmetric=False), "weights.symmetric"),
    ("int8-per-tensor", "int8wo", lambda qc: _group(qc)["weights"].update(strategy="tensor"), "weights.strategy"),
    ("w8a8-int", "int8wo", lambda qc: _group(qc).update(input_activations=dict(
        num_bits=8, type="int", strategy="token", symmetric=True, dynamic=True)), "input_activations"),
    ("static-activations", "fp8", lambda qc: _group(qc)["input_activations"].update(strategy="tensor", dynamic=False),
     "input_activations.dynamic"),
    ("fp8-weight-only", "fp8", lambda qc: _group(qc).update(input_activations=None), "input_activations"),
    ("sparsity", "int8wo", lambda qc: qc.update(sparsity_config={"format": "sparse-24-bitmask"}), "sparsity_config"),
    ("kv-cache-scheme", "fp8", lambda qc: qc.update(kv_cache_scheme=dict(num_bits=8, type="float")),
     "kv_cache_scheme"),
    ("lm-head-quantized", "int8wo", lambda qc: qc.update(ignore=[]), "ignore"),
    ("format", "int8wo", lambda qc: qc.update(format="marlin-24"), "format"),
    ("two-groups", "int8wo", lambda qc: qc["config_groups"].update(group_1=_group(qc)), "config_groups"),
    ("frozen", "int8wo", lambda qc: qc.update(quantization_status="frozen"), "quantization_status"),
]


@pytest.mark.parametrize("name, scheme, change, field", REFUSED, ids=[r[0] for r in REFUSED])
def test_an_unsupported_scheme_is_refused_naming_the_field(prequant, tmp_path, name, scheme, change, field):
    folder = write_config(tmp_path / name, prequant("tiny-qwen3", scheme), change)
    with pytest.raises(ValueError) as err:
        LLM(folder, max_running_reqs=2, max_seq_len=64, overlap=False)
    message = str(err.value)
    assert f"quantization_config.{field}" in message or f".{field} =" in message, \
        f"{name}: the error should name {field}: {message}"
    assert "supported" in message, f"{name}: the error should say what is supported: {message}"


def test_the_flag_defaults_to_the_checkpoint_and_a_conflicting_one_is_refused(prequant):
    from minisgl.engine.config import EngineConfig

    folder = prequant("tiny-qwen3", "fp8")
    assert EngineConfig(folder).quantization == "fp8"
    assert EngineConfig(folder, quantization="fp8").quantization == "fp8"
    assert EngineConfig(model_path("tiny-qwen3")).quantization is None, "a float checkpoint stays unquantized"
    with pytest.raises(ValueError, match="quantization 'int8wo' conflicts"):
        EngineConfig(folder, quantization="int8wo")


@pytest.mark.stubs("int8_linear")
def test_tensor_parallel_ranks_take_their_slices_of_the_codes_and_scales(prequant):
    """tp_size 2 (gloo) on the int8wo checkpoint: the codes are cut as the weights are; per-channel scales follow
    the rows of the column-parallel layers and stay whole in the row-parallel ones (every rank computes every
    output row). The ranks then hold the checkpoint's numbers exactly, so greedy tokens equal HF's on it."""
    folder = prequant("tiny-qwen3", "int8wo")
    prompts = prompt_ids("tiny-qwen3", 3)
    llm = LLM(folder, tp_size=2, max_running_reqs=4, max_seq_len=128, overlap=False)
    try:
        got = [o["token_ids"] for o in llm.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True))]
    finally:
        llm.shutdown()
    for i, (ids, tokens) in enumerate(zip(prompts, got)):
        want = hf_prequant_greedy(folder, ids, 8)
        assert tokens == want, f"request {i}: tp_size 2 {tokens}, HF on the checkpoint {want}"


def prequantized_hf(folder: Path, method: str):
    """HF float32 SmolLM2 whose decoder linear layers multiply through the chapter's functions with the checkpoint's
    codes and scales, as the engine reads them (quantized_tensors), the LM head float32 as in the engine."""
    from minisgl.models.weight import iter_safetensors
    from minisgl.quant.checkpoint import quantized_tensors

    state = dict(quantized_tensors(iter_safetensors(folder), method))
    matmul = int8_linear if method == "int8wo" else fp8_linear
    model = copy.deepcopy(hf_model("smollm2"))
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and "lm_head" not in name:
            q, s = state[f"{name}.weight"], state[f"{name}.weight_scale"]
            mod.forward = (lambda q, s, b: lambda x: matmul(x, q, s, b))(q, s, mod.bias)
    return model


@pytest.mark.stubs("int8_linear", "quantize_fp8")
@pytest.mark.parametrize("method", list(QUALITY))
def test_smollm2_prequantized_logits_top1_and_perplexity_within_the_methods_bounds(prequant, method):
    """The bounds of the chapter's own quantization (QUALITY) hold for SmolLM2 written pre-quantized and read back."""
    check_quality(prequantized_hf(prequant("smollm2", method), method), method, f"{method} pre-quantized")


PREQUANT_TOP1 = {"int8wo": ENGINE_TOP1["int8wo"], "fp8": ENGINE_TOP1["fp8"]}


@pytest.mark.stubs("int8_linear", "quantize_fp8")
@pytest.mark.parametrize("scheme", list(PREQUANT_TOP1))
def test_smollm2_prequantized_next_token_agrees_with_float32_over_the_text(prequant, scheme):
    """SmolLM2 written pre-quantized and loaded by the engine: the next token of the text's 48 prefixes against HF
    float32, within the bound of the engine quantizing SmolLM2 itself."""
    folder = prequant("smollm2", scheme)
    ids = text_ids()
    want = hf_logits("smollm2", ids).argmax(-1)
    llm = LLM(folder, max_running_reqs=8, max_seq_len=256, overlap=False)
    assert llm.engine.config.quantization == scheme
    outs = llm.generate([ids[:n] for n in PREFIXES], SamplingParams(max_tokens=1))
    agree = sum(int(o["token_ids"][0] == int(want[n - 1])) for o, n in zip(outs, PREFIXES)) / len(outs)
    assert agree >= PREQUANT_TOP1[scheme], f"{scheme} pre-quantized: next-token agreement {agree:.3f}, bound " \
                                           f"{PREQUANT_TOP1[scheme]}"
    assert_clean(llm)


# --- the GPU -------------------------------------------------------------------------------------------------------

def cuda_or_skip() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


@pytest.mark.gpu
@pytest.mark.stubs("quantize_fp8")
@pytest.mark.parametrize("per_row", [True, False], ids=["per-channel", "per-tensor"])
def test_on_the_gpu_fp8_scaled_mm_matches_the_emulation_and_bfloat16(per_row):
    """torch._scaled_mm (FP8 tensor cores, compute capability 8.9+) against the same FP8 operands multiplied in
    float32 (equal up to the bfloat16 result: 2^-8 relative), and against the bfloat16 multiply of the unquantized
    weight (the FP8 bound of the CPU test)."""
    cuda_or_skip()
    from minisgl.quant.fp8 import scaled_mm_applies

    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9 or later")
    g = torch.Generator(device="cuda").manual_seed(5)
    w = torch.randn(256, 512, generator=g, device="cuda")
    x = torch.randn(7, 512, generator=g, device="cuda").bfloat16()
    ws = fp8_scale(w, per_row=per_row).flatten()
    qw = quantize_fp8(w, ws.reshape(-1, 1) if per_row else ws)
    assert scaled_mm_applies(x, qw)
    y = fp8_linear(x, qw, ws)
    assert y.dtype == torch.bfloat16
    xs = fp8_scale(x.float(), per_row=True)
    emulated = (quantize_fp8(x, xs).double() * xs.double()) @ (qw.double() * ws.double().reshape(-1, 1)).t()
    err = (y.double() - emulated).abs()
    bound = 2.0**-7 * emulated.abs() + 1e-2
    bad = first_bad(err.cpu(), bound.cpu())
    assert bad is None, f"token {bad[0]}, output {bad[1]}: _scaled_mm {float(y[bad]):.6g}, emulated {float(emulated[bad]):.6g}"
    want = x.double() @ w.double().t()
    bad = first_bad((y.double() - want).abs().cpu(), (0.13 * (x.double().abs() @ w.double().abs().t()) + 1e-2).cpu())
    assert bad is None, f"token {bad[0]}, output {bad[1]}: FP8 {float(y[bad]):.6g}, bfloat16 {float(want[bad]):.6g}"


@needs_triton
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the kernel runs for real (the gpu tests)")
@pytest.mark.parametrize("rows, out_features, in_features", [(1, 48, 300), (3, 70, 520), (20, 33, 64)])
def test_the_triton_int8_kernel_matches_float64_in_the_interpreter(rows, out_features, in_features):
    """The GPU's weight-only INT8 kernel, in Triton's interpreter: float32 rows (products in full precision) against
    float64 within float32's worst-case dot-product bound, split over the inputs where the shape asks for it (520
    inputs: 2 splits), ragged edges masked."""
    from minisgl.kernel.triton.int8_mm import int8_mm_triton

    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, in_features, generator=g)
    q = torch.randint(-127, 128, (out_features, in_features), generator=g, dtype=torch.int8)
    scale = torch.rand(out_features, generator=g) / 64
    y = int8_mm_triton(x, q, scale)
    want = (x.double() @ q.double().t()) * scale.double()
    # in float32, in_features rounded products summed in any order (any CPU's blocking), then the scale: the
    # classic bound, (2 in_features + 2) roundings of 2^-24 relative to the sum of magnitudes
    bound = (2 * in_features + 2) * 2.0**-24 * (x.double().abs() @ q.double().abs().t()) * scale.double() + 1e-9
    bad = first_bad((y.double() - want).abs(), bound)
    assert bad is None, f"row {bad[0]}, output {bad[1]}: kernel {float(y[bad]):.8g}, float64 {float(want[bad]):.8g}"


@pytest.mark.gpu
@pytest.mark.stubs("quantize_int8_per_channel", "int8_linear")
def test_on_the_gpu_int8_linear_matches_float64():
    """At 1, 6 and 24 rows (the course's Triton kernel: one program block of rows, split over the inputs) and 200
    (the dense path), against float64."""
    cuda_or_skip()
    from minisgl.quant.int8 import probe_cuda_kernel

    print(f"torch's INT8 kernel on CUDA: {probe_cuda_kernel(torch.device('cuda'))}")
    w = weights().cuda()
    q, scale = quantize_int8_per_channel(w)
    wd = q.double() * scale.double()[:, None]
    for rows in (1, 6, 24, 200):
        x = torch.randn(rows, w.shape[1], device="cuda").bfloat16()
        y = int8_linear(x, q, scale)
        want = x.double() @ wd.t()
        bound = 2.0**-7 * (x.double().abs() @ wd.abs().t()) + 1e-6
        bad = first_bad((y.double() - want).abs().cpu(), bound.cpu())
        assert bad is None, f"{rows} rows: row {bad[0]}, output {bad[1]}: got {float(y[bad]):.6g}, expected " \
                            f"{float(want[bad]):.6g}"


@pytest.mark.gpu
@pytest.mark.stubs(*ALL)
@pytest.mark.parametrize("option", ["int8wo", "fp8", "fp8-kv"])
def test_on_the_gpu_engine_with_cuda_graphs_agrees_with_float32_over_the_text(option):
    """bfloat16 on the GPU, CUDA graphs on (decode replays them), auto attention backend (Triton with FP8 KV): the
    next token over the text's prefixes against HF float32, within the CPU test's bound less 0.05 for bfloat16;
    then greedy decoding of 16 tokens through the graphs equals the same engine's eager decoding."""
    cuda_or_skip()
    model_or_skip("smollm2")
    options = dict(ENGINE_OPTIONS, **{"fp8-kv": dict(kv_cache_dtype="fp8_e4m3")})[option]
    ids = text_ids()
    want = hf_logits("smollm2", ids).argmax(-1)
    llm = LLM(model_path("smollm2"), device="cuda", max_running_reqs=8, max_seq_len=256, overlap=False, **options)
    assert llm.engine.graph_runner is not None, "CUDA graphs are on by default on the GPU"
    outs = llm.generate([ids[:n] for n in PREFIXES], SamplingParams(max_tokens=1))
    agree = sum(int(o["token_ids"][0] == int(want[n - 1])) for o, n in zip(outs, PREFIXES)) / len(outs)
    bound = min(ENGINE_TOP1.values()) - 0.05
    assert agree >= bound, f"{option} on the GPU: next-token agreement {agree:.3f}, bound {bound:.2f}"
    prompts = [ids[:20], ids[40:70]]
    graphs = [o["token_ids"] for o in llm.generate(prompts, SamplingParams(max_tokens=16))]
    eager = LLM(model_path("smollm2"), device="cuda", max_running_reqs=8, max_seq_len=256, overlap=False,
                cuda_graph_max_bs=0, **options)
    plain = [o["token_ids"] for o in eager.generate(prompts, SamplingParams(max_tokens=16))]
    assert graphs == plain, f"{option}: with CUDA graphs {graphs}, eager {plain}"
    assert_clean(llm)


@pytest.mark.gpu
@needs_triton
@pytest.mark.stubs("quantize_fp8", "MHAKVCache.store_kv")
def test_on_the_gpu_fp8_kv_triton_equals_torch_and_flash_attn_is_refused_by_name():
    cuda_or_skip()
    prompts = prompt_ids("tiny-qwen3", 3)
    outs = {}
    for backend in ("torch", "triton"):
        llm = fp8_kv_llm(backend, device="cuda", dtype="float32", cuda_graph_max_bs=0)
        outs[backend] = [o["token_ids"] for o in llm.generate(prompts, SamplingParams(max_tokens=8))]
    assert outs["torch"] == outs["triton"], f"torch {outs['torch']}, triton {outs['triton']}"
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        LLM(model_path("tiny-qwen3"), device="cuda", attention_backend="fa", page_size=256, kv_cache_dtype="fp8_e4m3")
