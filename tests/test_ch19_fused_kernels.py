"""Chapter 19: fused kernels. The Triton KV store against indexed assignment, the Triton RMSNorm kernels against
float64 and against the torch ops, the MINISGL_FUSED_KERNELS setting, and the engine on the fused kernels
against HF greedy. On a CPU the kernels run in Triton's interpreter, on CUDA for real (`make test-gpu`)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import torch

ON_CUDA = torch.cuda.is_available()
if not ON_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run in its numpy interpreter

from helpers import HAS_TRITON, assert_clean, hf_greedy, model_path, needs_triton, prompt_ids  # noqa: E402
from minisgl import env  # noqa: E402
from minisgl.core import SamplingParams  # noqa: E402
from minisgl.kernel import torch_ops  # noqa: E402
from minisgl.kernel.triton import use_triton  # noqa: E402
from minisgl.kvcache.mha_pool import MHAKVCache  # noqa: E402
from minisgl.layers.norm import RMSNorm, RMSNormFused  # noqa: E402
from minisgl.layers.rotary import RotaryEmbedding  # noqa: E402
from minisgl.llm import LLM  # noqa: E402

if HAS_TRITON:  # Linux only: without it the kernels' tests skip, and the setting is still tested
    from minisgl.kernel.triton import norm as triton_norm
    from minisgl.kernel.triton import store as triton_store
    from minisgl.kernel.triton.activation import silu_and_mul
    from minisgl.kernel.triton.rope import qk_norm_rope

DEVICE = torch.device("cuda" if ON_CUDA else "cpu")
pytestmark = pytest.mark.anydevice  # the whole suite runs on CUDA under `make test-gpu`
NORM_STUBS = ("_rmsnorm_kernel", "_fused_add_rmsnorm_kernel")
ALL_STUBS = ("_store_kv_kernel", *NORM_STUBS, "use_triton")
EPS = 1e-6

# Triton's interpreter converts float32 to bfloat16 by truncating the mantissa (a GPU rounds to nearest even),
# so bfloat16 results are only checked on CUDA. float16 goes through numpy, which rounds like a GPU.
LOW = [torch.float16] + ([torch.bfloat16] if ON_CUDA else [])


@pytest.fixture
def fused(monkeypatch):
    """Set MINISGL_FUSED_KERNELS for this test: ENV is a frozen dataclass read once at import, and use_triton
    reads it through the module at every call, so a replaced ENV is what it sees."""
    def set_mode(mode: str) -> None:
        monkeypatch.setattr(env, "ENV", dataclasses.replace(env.ENV, FUSED_KERNELS=mode))
    return set_mode


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- the KV store
def _store_case(n, heads, dim, src_dtype, cache_dtype, seed):
    g = gen(seed)
    slots = n + 11
    k_cache = torch.randn(slots, heads, dim, generator=g).to(DEVICE, cache_dtype)  # other slots must survive
    v_cache = torch.randn(slots, heads, dim, generator=g).to(DEVICE, cache_dtype)
    k = torch.randn(n, heads * dim, generator=g).to(DEVICE, src_dtype)
    # v as the model hands it over: a slice of the fused QKV output, so its rows are not contiguous
    qkv = torch.randn(n, 3 * heads * dim, generator=g).to(DEVICE, src_dtype)
    v = qkv[:, 2 * heads * dim:].view(n, heads, dim)
    out_loc = torch.randperm(slots, generator=g)[:n].to(DEVICE)
    return k, v, k_cache, v_cache, out_loc


@needs_triton
@pytest.mark.stubs("_store_kv_kernel")
@pytest.mark.parametrize("src_dtype,cache_dtype", [(torch.float32, torch.float32), (torch.float32, torch.float16),
                                                   (torch.float16, torch.float32)]
                         + ([(torch.float32, torch.bfloat16)] if ON_CUDA else []))
@pytest.mark.parametrize("n,heads,dim,max_block", [(9, 2, 32, 1024), (5, 3, 32, 32), (1, 8, 16, 1024)])
def test_store_kv_kernel_equals_indexed_assignment(n, heads, dim, max_block, src_dtype, cache_dtype):
    k, v, k_cache, v_cache, out_loc = _store_case(n, heads, dim, src_dtype, cache_dtype, seed=n)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    want_k[out_loc] = k.view(n, heads, dim).to(cache_dtype)
    want_v[out_loc] = v.to(cache_dtype)
    # max_block 32 on rows of 96: three blocks per token, the program grid's second axis
    triton_store.store_kv(k, v, k_cache, v_cache, out_loc.to(torch.int32), max_block=max_block)
    assert torch.equal(k_cache, want_k), "k cache: each token's key lands in its slot, nothing else changes"
    assert torch.equal(v_cache, want_v), "v cache: each token's value lands in its slot, nothing else changes"


@needs_triton
@pytest.mark.stubs("_store_kv_kernel")
def test_store_kv_checks_shapes_and_accepts_no_tokens():
    k, v, k_cache, v_cache, out_loc = _store_case(4, 2, 16, torch.float32, torch.float32, seed=7)
    before = k_cache.clone()
    triton_store.store_kv(k[:0], v[:0], k_cache, v_cache, out_loc[:0])
    assert torch.equal(k_cache, before), "no tokens: nothing is written"
    with pytest.raises(ValueError, match="rows"):
        triton_store.store_kv(k[:, :16], v, k_cache, v_cache, out_loc)
    triton_store.store_kv(k, v, k_cache, v_cache, out_loc)  # int64 slots work as well as int32
    assert torch.equal(k_cache[out_loc], k.view(4, 2, 16)), "keys stored at their out_loc slots"


# ----------------------------------------------------------------------------- the norms
def _rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def _norm64(x, weight):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight.double()


def _norm_inputs(shape, dtype, seed):
    g = gen(seed)
    x = (torch.randn(shape, generator=g) * 3).to(DEVICE, dtype)
    residual = torch.randn(shape, generator=g).to(DEVICE, dtype)
    weight = (1 + 0.5 * torch.randn(shape[-1], generator=g)).to(DEVICE, dtype)
    return x, residual, weight


SHAPES = [(7, 128), (3, 576), (2, 5, 32)]  # 576: SmolLM2's hidden size, not a power of two (a masked block)
DTYPES = [(torch.float32, 1e-5)] + [(d, 1e-2) for d in LOW]


@needs_triton
@pytest.mark.stubs("_rmsnorm_kernel")
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_kernel_matches_float64(shape, dtype, tol):
    x, _, weight = _norm_inputs(shape, dtype, seed=1)
    out = triton_norm.rms_norm(x, weight, EPS)
    assert (out.shape, out.dtype) == (x.shape, dtype), f"output {tuple(out.shape)} {out.dtype}, want {shape} {dtype}"
    err = _rel_err(out, _norm64(x, weight))
    assert err < tol, f"{dtype} {shape}: relative error {err:.2e} against float64 (bound {tol})"


@needs_triton
@pytest.mark.stubs("_rmsnorm_kernel")
def test_rms_norm_kernel_reads_heads_sliced_out_of_qkv_in_place():
    g = gen(5)
    qkv = torch.randn(6, (4 + 2 + 2) * 32, generator=g).to(DEVICE)  # [tokens, q | k | v] as the projection makes it
    q = qkv[:, : 4 * 32].view(6, 4, 32)  # rows 256 numbers apart, heads 32 apart: not reshapeable without a copy
    k = qkv[:, 4 * 32 : 6 * 32].view(6, 2, 32)
    weight = (1 + 0.5 * torch.randn(32, generator=g)).to(DEVICE)
    before = qkv.clone()
    for heads in (q, k):
        out = triton_norm.rms_norm(heads, weight, EPS)
        assert out.shape == heads.shape, f"output {tuple(out.shape)}, heads {tuple(heads.shape)}"
        assert out.is_contiguous(), "the output is a fresh contiguous tensor"
        err = _rel_err(out, _norm64(heads, weight))
        assert err < 1e-5, f"heads sliced out of qkv: relative error {err:.2e} against float64"
    assert torch.equal(qkv, before), "the input is only read"


@needs_triton
@pytest.mark.stubs("_fused_add_rmsnorm_kernel")
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_add_rms_norm_kernel_matches_float64(shape, dtype, tol):
    x, residual, weight = _norm_inputs(shape, dtype, seed=2)
    normed, summed = triton_norm.fused_add_rms_norm(x, residual, weight, EPS)
    assert normed.dtype == summed.dtype == dtype, f"dtypes {normed.dtype}, {summed.dtype}, want {dtype}"
    assert normed.shape == summed.shape == x.shape, f"shapes {tuple(normed.shape)}, {tuple(summed.shape)}"
    # One rounding of an exact float32 sum to the model dtype is what torch's x + residual does too.
    assert torch.equal(summed, x + residual), "the summed output is x + residual"
    err = _rel_err(normed, _norm64(summed, weight))
    assert err < tol, f"{dtype} {shape}: relative error {err:.2e} against float64 (bound {tol})"


def _steps_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many representable 16-bit values apart a and b are at most (their signs agree here)."""
    return (a.view(torch.int16).int() - b.view(torch.int16).int()).abs().max().item()


@needs_triton
@pytest.mark.stubs(*NORM_STUBS)
@pytest.mark.parametrize("dtype", [torch.float32] + LOW)
def test_kernels_agree_with_the_torch_ops(dtype):
    x, residual, weight = _norm_inputs((64, 1024), dtype, seed=3)
    normed, summed = triton_norm.fused_add_rms_norm(x, residual, weight, EPS)
    want_normed, want_summed = torch_ops.fused_add_rms_norm(x, residual, weight, EPS)
    plain, want_plain = triton_norm.rms_norm(x, weight, EPS), torch_ops.rms_norm(x, weight, EPS)
    assert torch.equal(summed, want_summed), "the summed output equals the torch op's"
    if dtype == torch.float32:
        torch.testing.assert_close(normed, want_normed, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(plain, want_plain, rtol=1e-5, atol=1e-6)
        return
    # The same steps in the same order; only the float32 sum of squares is added up in another order, so the
    # variance differs by float32 ulps. That moves an output to the neighbouring 16-bit value only when it sits
    # that close to a rounding boundary: rarely, and by at most one step before and one after the weight.
    for got, want in [(normed, want_normed), (plain, want_plain)]:
        differ = (got != want).float().mean().item()
        assert differ < 0.01, f"{dtype}: {differ:.2%} of the outputs differ from the torch op's"
        assert _steps_apart(got, want) <= 2, f"{dtype}: outputs {_steps_apart(got, want)} 16-bit steps apart"


# ----------------------------------------------------------------------------- the setting
# ----------------------------------------------------------------------------- q/k norm + RoPE, SiLU-and-mul
@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, *LOW])
@pytest.mark.parametrize("norm", [True, False], ids=["qwen3", "llama"])
@pytest.mark.parametrize("q_heads,kv_heads", [(4, 2), (6, 3)])
def test_qk_norm_rope_kernel_equals_the_torch_chain_in_place(dtype, norm, q_heads, kv_heads):
    """q and k sliced out of a QKV output, positions a strided view (as a decode batch hands them over); head
    counts that are not powers of two leave lanes of the kernel's tile of heads unused."""
    tokens, dim = 7, 64
    g = gen(11)
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * dim, generator=g).to(DEVICE, dtype)
    q = qkv[:, : q_heads * dim].view(tokens, q_heads, dim)
    k = qkv[:, q_heads * dim : (q_heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    v_before = qkv[:, (q_heads + kv_heads) * dim :].clone()
    pairs = torch.tensor([[0, 5], [1, 0], [2, 130], [3, 77], [4, 1], [5, 255], [6, 9]], device=DEVICE)
    positions = pairs[:, 1]  # stride 2, like _prepare_decode's column of the (row, position) pairs
    rotary = RotaryEmbedding(dim, 256, 10000.0)
    weights = [(torch.rand(dim, generator=g) + 0.5).to(DEVICE, dtype) for _ in range(2)] if norm else [None, None]
    want_q, want_k = (torch_ops.rms_norm(q, weights[0], EPS), torch_ops.rms_norm(k, weights[1], EPS)) if norm else (q, k)
    want_q, want_k = rotary(positions, want_q, want_k)
    cos, sin = rotary.tables(DEVICE)
    got_q, got_k = qk_norm_rope(q, k, positions, cos, sin, *weights, EPS)
    assert got_q.data_ptr() == q.data_ptr() and got_k.data_ptr() == k.data_ptr(), "q and k are rotated in place"
    # The same roundings as the torch chain, but a compiler may fuse a multiply and an add (FMA) where the chain
    # rounds in between, and the norm's float32 sum of squares is added up in another order: either can move an
    # output by one rounding step of its dtype (a float32 ulp; 0.4-0.8% in bfloat16), never more.
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got_q, want_q, rtol=tol, atol=tol, msg="q differs from rms_norm + RoPE in torch")
    torch.testing.assert_close(got_k, want_k, rtol=tol, atol=tol, msg="k differs from rms_norm + RoPE in torch")
    assert torch.equal(qkv[:, (q_heads + kv_heads) * dim :], v_before), "v is untouched"


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, *LOW])
@pytest.mark.parametrize("shape", [(5, 2 * 96), (2, 3, 2 * 1500)])
def test_silu_and_mul_kernel_equals_the_torch_op(shape, dtype):
    x = torch.randn(*shape, generator=gen(12)).mul(3).to(DEVICE, dtype)
    got, want = silu_and_mul(x), torch_ops.silu_and_mul(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    # F.silu's exp and Triton's may differ in the last float32 bit, which a 16-bit rounding almost always hides
    torch.testing.assert_close(got, want, rtol=2e-6 if dtype == torch.float32 else 1e-2, atol=1e-6,
                               msg="silu(gate) * up differs from the torch op")


@pytest.mark.stubs("use_triton")
def test_use_triton_follows_the_setting(fused):
    cpu = torch.zeros(2)
    fused("off")
    assert not use_triton(cpu), "off never picks the kernels"
    fused("auto")
    assert not use_triton(cpu), "auto never picks the interpreter"
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        fused("on")
        with pytest.raises(ValueError, match="MINISGL_FUSED_KERNELS"):
            use_triton(cpu)
        os.environ["TRITON_INTERPRET"] = "1"
        if HAS_TRITON:
            assert use_triton(cpu), "on + the interpreter: the kernels run on the CPU"
        else:  # a machine without Triton (macOS): "on" cannot be honoured, and says what is missing
            with pytest.raises(ValueError, match="triton"):
                use_triton(cpu)
    finally:
        os.environ.pop("TRITON_INTERPRET", None)
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved
    if ON_CUDA:
        gpu = cpu.to(DEVICE)
        for mode, want in [("auto", True), ("on", True), ("off", False)]:
            fused(mode)
            assert use_triton(gpu) == want, f"on the GPU, {mode} should give {want}"


def _read_setting(value: str | None) -> subprocess.CompletedProcess:
    child = dict(os.environ)
    child.pop("MINISGL_FUSED_KERNELS", None)
    if value is not None:
        child["MINISGL_FUSED_KERNELS"] = value
    return subprocess.run([sys.executable, "-c", "from minisgl.env import ENV; print(ENV.FUSED_KERNELS)"],
                          env=child, capture_output=True, text=True)


def test_the_setting_is_read_from_the_environment_and_checked():
    for value, want in [(None, "auto"), ("on", "on"), ("OFF", "off"), (" auto ", "auto")]:
        proc = _read_setting(value)
        got = proc.stdout.strip()
        assert proc.returncode == 0 and got == want, f"{value!r} read as {got!r}, want {want!r}: {proc.stderr[-500:]}"
    proc = _read_setting("fast")
    assert proc.returncode != 0, "an unknown setting stops the program"
    assert "ValueError" in proc.stderr and "MINISGL_FUSED_KERNELS" in proc.stderr, proc.stderr[-500:]


# ----------------------------------------------------------------------------- the layers and the engine
@pytest.fixture
def calls(monkeypatch):
    """Count the calls of the Triton wrappers (the layers look them up at call time)."""
    counts = {"rms_norm": 0, "fused_add_rms_norm": 0, "store_kv": 0}

    def spy(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapper)

    spy(triton_norm, "rms_norm")
    spy(triton_norm, "fused_add_rms_norm")
    spy(triton_store, "store_kv")
    return counts


@needs_triton
@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("mode", ["on", "off"])
def test_layers_pick_the_kernels_by_the_setting(mode, fused, calls):
    fused(mode)
    x, residual, weight = _norm_inputs((6, 64), torch.float32, seed=4)
    norm = RMSNormFused(64, EPS)
    norm.weight = weight
    normed, summed = norm(x, residual)
    first, same = norm(x)
    heads = RMSNorm(64, EPS)  # the q/k norm of Qwen3: [tokens, heads, head_dim]
    heads.weight = weight
    per_head = heads(x.view(2, 3, 64))
    cache = MHAKVCache(num_kv_heads=2, head_dim=32, num_layers=2, num_pages=5, page_size=2, device=DEVICE)
    cache.store_kv(x, residual.view(6, 2, 32), torch.tensor([9, 0, 4, 5, 1, 2], device=DEVICE), layer_id=1)
    on = mode == "on"
    assert calls == {"rms_norm": 2 * on, "fused_add_rms_norm": int(on), "store_kv": int(on)}
    want_normed, want_summed = torch_ops.fused_add_rms_norm(x, residual, weight, EPS)
    torch.testing.assert_close(normed, want_normed, rtol=1e-5, atol=1e-6)
    assert torch.equal(summed, want_summed), "the summed output equals the torch op's"
    assert same is x, "with no residual yet, x itself is carried"
    torch.testing.assert_close(first, torch_ops.rms_norm(x, weight, EPS), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(per_head, torch_ops.rms_norm(x.view(2, 3, 64), weight, EPS), rtol=1e-5, atol=1e-6)
    assert torch.equal(cache.k_cache(1)[[9, 0, 4, 5, 1, 2]], x.view(6, 2, 32)), "keys stored at their slots"
    assert torch.equal(cache.v_cache(1)[[9, 0, 4, 5, 1, 2]], residual.view(6, 2, 32)), "values stored at their slots"
    assert cache.k_cache(0).abs().sum() == 0, "the other layer is untouched"


@needs_triton
@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama"])
def test_engine_on_the_fused_kernels_matches_hf(name, fused, calls):
    fused("on")
    prompts = prompt_ids(name, 3)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (6, 9, 4)]
    llm = LLM(model_path(name), device=DEVICE.type, dtype="float32", page_size=4, max_running_reqs=2,
              max_seq_len=128, max_extend_tokens=8)
    outputs = llm.generate(prompts, params)
    got = [o["token_ids"] for o in outputs]
    assert got == [hf_greedy(name, p, s.max_tokens) for p, s in zip(prompts, params)], f"{name}: tokens differ from HF"
    assert min(calls.values()) > 0, f"every fused kernel ran: {calls}"
    assert_clean(llm)
