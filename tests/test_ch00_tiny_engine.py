"""Chapter 0: the one-file engine. Its pieces against float64 formulas; its logits and greedy output against HF."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest
import torch

from helpers import MODEL_NAMES, hf_greedy, hf_logits, hf_model, model_path, prompt_ids
from tiny_engine import TinyEngine, attention, rms_norm, rope, rope_inv_freq

FORWARD_STUBS = ("rms_norm", "rope", "attention", "TinyEngine.decoder_layer")
GENERATE_STUBS = (*FORWARD_STUBS, "TinyEngine.generate")


@lru_cache(maxsize=None)
def engine(name: str) -> TinyEngine:
    return TinyEngine(model_path(name))


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours.double() - ref.double()).norm() / ref.double().norm())


# ----------------------------------------------------------------------------- rms_norm


@pytest.mark.stubs("rms_norm")
def test_rms_norm_matches_float64_formula():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 64, generator=gen) * 3
    weight = torch.rand(64, generator=gen) + 0.5
    out = rms_norm(x, weight, 1e-6)
    x64 = x.double()
    ref = weight.double() * x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert out.shape == x.shape and out.dtype == torch.float32, f"shape {tuple(out.shape)}, dtype {out.dtype}"
    assert rel_err(out, ref) < 1e-6, f"relative error {rel_err(out, ref):.2e} against the float64 formula"


@pytest.mark.stubs("rms_norm")
def test_rms_norm_eps_and_float32_statistics():
    out = rms_norm(torch.zeros(2, 8), torch.ones(8), 1e-6)
    assert torch.equal(out, torch.zeros(2, 8)), "eps keeps an all-zero row finite"
    # 300**2 overflows float16 (max 65504): the mean of squares must be taken in float32.
    x = torch.full((1, 16), 300.0, dtype=torch.float16)
    out = rms_norm(x, torch.ones(16, dtype=torch.float16), 1e-6)
    assert out.dtype == torch.float16 and out.shape == x.shape
    assert torch.allclose(out.float(), torch.ones(1, 16), atol=1e-3), "compute the statistics in float32"


# ----------------------------------------------------------------------------- rope


def rope_float64(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Pair (i, i + d/2) of every head turns by angle pos * inv_freq[i] (the angle itself taken in float32)."""
    half = x.shape[-1] // 2
    angle = (positions.float()[:, None] * inv_freq[None, :]).double()[:, None, :]  # [tokens, 1, d/2]
    a, b = x.double()[..., :half], x.double()[..., half:]
    return torch.cat([a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()], dim=-1)


@pytest.mark.stubs("rope")
def test_rope_matches_float64_formula():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(7, 3, 32, generator=gen)
    positions = torch.tensor([0, 1, 2, 5, 17, 100, 511])
    inv_freq = rope_inv_freq(32, {"rope_type": "default", "rope_theta": 10000.0})
    out = rope(x, positions, inv_freq)
    assert out.shape == x.shape and out.dtype == x.dtype, f"shape {tuple(out.shape)}, dtype {out.dtype}"
    ref = rope_float64(x, positions, inv_freq)
    worst = (out.double() - ref).abs().amax(dim=(1, 2))  # per position
    assert torch.allclose(out.double(), ref, atol=1e-5), (
        f"rotated x differs from the float64 formula by up to {worst.max():.2e} at position "
        f"{positions[worst.argmax()].item()} (allclose, atol 1e-5)")
    assert torch.equal(out[0], x[0]), "position 0 is not rotated"
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-5), "a rotation keeps the length"


@pytest.mark.stubs("rope")
def test_rope_scores_depend_on_relative_position_only():
    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 1, 64, generator=gen), torch.randn(1, 1, 64, generator=gen)
    inv_freq = rope_inv_freq(64, {"rope_type": "default", "rope_theta": 10000.0})

    def score(m: int, n: int) -> float:
        return float((rope(q, torch.tensor([m]), inv_freq) * rope(k, torch.tensor([n]), inv_freq)).sum())

    base = score(3, 1)
    for m, n in [(10, 8), (50, 48), (200, 198)]:
        assert score(m, n) == pytest.approx(base, rel=1e-4, abs=1e-4), f"q at {m}, k at {n}"
    assert score(3, 0) != pytest.approx(base, rel=1e-3), "a different distance gives a different score"


def test_llama3_inv_freq_matches_hf():
    config = json.loads((model_path("tiny-llama") / "config.json").read_text())
    ours = rope_inv_freq(config["head_dim"], engine("tiny-llama").config.rope)
    hf = hf_model("tiny-llama").model.rotary_emb.inv_freq.float()
    assert torch.allclose(ours, hf, rtol=1e-6), f"inv_freq {ours.tolist()}, HF's {hf.tolist()}"


# ----------------------------------------------------------------------------- attention


def attention_float64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Every query of a full sequence, one head at a time; query head h reads KV head h // group."""
    n, heads, d = q.shape
    group = heads // k.shape[1]
    out = torch.zeros(n, heads, d, dtype=torch.float64)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for h in range(heads):
        qh, kh, vh = q[:, h].double(), k[:, h // group].double(), v[:, h // group].double()
        scores = (qh @ kh.T / d**0.5).masked_fill(~causal, float("-inf"))
        out[:, h] = scores.softmax(-1) @ vh
    return out


@pytest.mark.stubs("attention")
def test_attention_with_cache_equals_full_attention():
    gen = torch.Generator().manual_seed(3)
    n, heads, kv_heads, d = 9, 6, 2, 16
    q = torch.randn(n, heads, d, generator=gen)
    k, v = torch.randn(n, kv_heads, d, generator=gen), torch.randn(n, kv_heads, d, generator=gen)
    ref = attention_float64(q, k, v)
    for n_new in (n, 4, 1):  # prefill (no cache), a chunk after 5 cached tokens, one decode step
        out = attention(q[n - n_new:], k, v)
        assert out.shape == (n_new, heads, d) and out.dtype == torch.float32
        assert rel_err(out, ref[n - n_new:]) < 1e-5, f"{n_new} new queries after {n - n_new} cached tokens"


@pytest.mark.stubs("attention")
def test_attention_never_looks_ahead():
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(6, 4, 8, generator=gen)
    k, v = torch.randn(6, 2, 8, generator=gen), torch.randn(6, 2, 8, generator=gen)
    before = attention(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[4:], v2[4:] = 100.0, -100.0  # change the last two positions only
    after = attention(q, k2, v2)
    assert torch.allclose(before[:4], after[:4]), "a query saw a key after its own position"
    assert not torch.allclose(before[4:], after[4:]), "the last two queries must see the keys that changed"


# ----------------------------------------------------------------------------- the engine vs Hugging Face


@pytest.mark.stubs(*FORWARD_STUBS)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forward_logits_match_hf(name):
    for ids in prompt_ids(name, 2):
        ours = engine(name).forward(ids, start_pos=0)
        ref = hf_logits(name, ids)
        assert ours.shape == ref.shape, "one row of logits per input token"
        assert rel_err(ours, ref) < 1e-4, f"{name}: relative logit error {rel_err(ours, ref):.2e}"


@pytest.mark.stubs(*FORWARD_STUBS)
def test_prefill_in_pieces_uses_the_cache():
    eng = engine("tiny-qwen3")
    ids = prompt_ids("tiny-qwen3", 1)[0]
    whole = eng.forward(ids, start_pos=0)
    first = eng.forward(ids[:4], start_pos=0)
    rest = eng.forward(ids[4:], start_pos=4)
    assert eng.cached_len == len(ids)
    assert all(k.shape[0] == len(ids) and v.shape[0] == len(ids) for k, v in eng.cache)
    assert rel_err(torch.cat([first, rest]), whole) < 1e-5, "tokens fed after a cached prefix see it"


@pytest.mark.stubs(*GENERATE_STUBS)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_generate_matches_hf_greedy(name):
    n = 16  # SmolLM2's answer to the first chat prompt ends after 8 tokens: without eos_ids, decoding goes on
    for ids in prompt_ids(name, 2 if name == "smollm2" else 3):
        out = engine(name).generate(ids, n)
        assert out == hf_greedy(name, ids, n), f"{name}: greedy output differs from HF"
    assert engine(name).cached_len == len(ids) + n - 1, "the last token is returned, never fed back"


@pytest.mark.stubs(*GENERATE_STUBS)
def test_generate_stops_after_eos():
    ids = prompt_ids("tiny-qwen3", 1)[0]
    full = hf_greedy("tiny-qwen3", ids, 16)
    eos = full[5]
    stop = full.index(eos)
    assert engine("tiny-qwen3").generate(ids, 16, eos_ids=[eos]) == full[: stop + 1], "EOS is kept, then stop"
    assert engine("tiny-qwen3").generate(ids, 16) == full, "no eos_ids: exactly max_new_tokens tokens"


@pytest.mark.stubs(*GENERATE_STUBS)
def test_chat_answer_ends_with_the_models_eos():
    eng = engine("smollm2")
    ids = prompt_ids("smollm2", 1)[0]
    out = eng.generate(ids, 48, eos_ids=list(eng.config.eos_ids))
    assert out == hf_greedy("smollm2", ids, 48, stop_at_eos=True)
    assert len(out) < 48 and out[-1] in eng.config.eos_ids


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_refused(tmp_path):
    eng = engine("tiny-qwen3")
    with pytest.raises(ValueError, match="empty prompt"):
        eng.generate([], 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        eng.generate([1, 2], 0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        eng.generate([1, eng.config.vocab_size], 4)
    with pytest.raises(ValueError, match="exceeds the context"):
        eng.generate([1] * eng.config.max_position, 1)
    with pytest.raises(ValueError, match="start_pos"):
        TinyEngine(model_path("tiny-qwen3")).forward([1], start_pos=3)
    with pytest.raises(ValueError, match="config.json"):
        TinyEngine(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ValueError, match="unknown model architecture 'GPT2LMHeadModel'"):
        TinyEngine(tmp_path)
