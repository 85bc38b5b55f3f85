"""Chapter 2: the pointwise math of the model, checked against float64 and against Hugging Face."""

from __future__ import annotations

import math

import pytest
import torch

from minisgl.kernel.torch_ops import apply_rotary_emb, fused_add_rms_norm, rms_norm, rotate_half, silu_and_mul
from minisgl.layers.base import BaseOP, OPList
from minisgl.layers.linear import LinearQKVMerged
from minisgl.layers.norm import RMSNorm, RMSNormFused
from minisgl.layers.rotary import RotaryEmbedding, default_inv_freq, llama3_inv_freq

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def rms_norm_float64(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x64 = x.double()
    return x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def rows_of_scales(scales: list[float], width: int = 64, seed: int = 0) -> torch.Tensor:
    """Random rows, row i multiplied by scales[i]: a row whose mean square is near eps is where eps matters."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(len(scales), width, generator=g) * torch.tensor(scales)[:, None]


@pytest.mark.stubs("rms_norm")
def test_rms_norm_matches_float64():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(7, 64, generator=g), torch.randn(64, generator=g)
    err = rel_err(rms_norm(x, w, 1e-6), rms_norm_float64(x, w, 1e-6))
    assert err < 1e-6, f"relative error {err:.2e} against the float64 formula"


# Rows from 1e-4 to 10: with eps = 1e-6, the rows near 1e-3 have a mean square near eps, so a norm without eps,
# or with eps added after the square root (x / (sqrt(mean) + eps)), is off by about 40% there; each row is
# normalised by its own mean square. A float32 norm stays within a few 1e-7 of the float64 formula.
@pytest.mark.stubs("rms_norm")
@pytest.mark.parametrize("eps", [1e-6, 1e-5, 1e-2])
def test_rms_norm_where_epsilon_matters(eps):
    x = rows_of_scales([1e-4, 5e-4, 1e-3, 3e-3, 1e-2, 1e-1, 1.0, 10.0])
    w = torch.linspace(-2.0, 2.0, 64)
    out, ref = rms_norm(x, w, eps), rms_norm_float64(x, w, eps)
    for i, (got, want) in enumerate(zip(out, ref)):
        err = rel_err(got, want)
        assert err < 1e-6, f"eps={eps}: row {i} (scale {x[i].abs().mean():.1e}) is off by {err:.2e} (relative)"


@pytest.mark.stubs("rms_norm")
def test_rms_norm_of_a_zero_row_is_zero():
    out = rms_norm(torch.zeros(2, 8), torch.ones(8), 1e-6)
    assert torch.isfinite(out).all(), f"eps keeps an all-zero row finite, got {out[0].tolist()}"
    assert out.tolist() == [[0.0] * 8] * 2, f"a zero row normalises to zeros, got {out.tolist()}"


@pytest.mark.stubs("rms_norm", "fused_add_rms_norm")
def test_norm_layers_use_their_own_epsilon():
    x, r = rows_of_scales([1e-2, 0.1, 1.0], seed=1), rows_of_scales([1e-2, 0.1, 1.0], seed=2)
    w = torch.linspace(0.5, 1.5, 64)
    for layer_type in (RMSNorm, RMSNormFused):
        layer = layer_type(64, eps=1e-2)  # the size of the mean square of the first rows
        layer.weight = w
        out = layer(x)[0] if layer_type is RMSNormFused else layer(x)
        err = rel_err(out, rms_norm_float64(x, w, 1e-2))
        assert err < 1e-6, f"{layer_type.__name__}(eps=1e-2) is off by {err:.2e} (relative)"
    layer = RMSNormFused(64, eps=1e-2)
    layer.weight = w
    normed, _ = layer(x, r)
    err = rel_err(normed, rms_norm_float64(x + r, w, 1e-2))
    assert err < 1e-6, f"RMSNormFused(eps=1e-2) with a residual is off by {err:.2e} (relative)"


@pytest.mark.stubs("rms_norm")
def test_rms_norm_matches_hf_in_bfloat16():
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 32, generator=g).bfloat16()
    hf = Qwen3RMSNorm(32, eps=1e-6)
    hf.weight.data = torch.randn(32, generator=g).bfloat16()  # a bf16 model: weight and activations in bf16
    out = rms_norm(x, hf.weight.data, 1e-6)
    assert out.dtype == hf(x).dtype == torch.bfloat16, f"rms_norm gave {out.dtype}, HF {hf(x).dtype}"
    assert torch.equal(out, hf(x)), "same operations in the same order give identical bits"


@pytest.mark.stubs("fused_add_rms_norm", "rms_norm")
def test_fused_add_rms_norm():
    g = torch.Generator().manual_seed(2)
    x, r, w = torch.randn(3, 16, generator=g), torch.randn(3, 16, generator=g), torch.randn(16, generator=g)
    normed, summed = fused_add_rms_norm(x, r, w, 1e-5)
    assert torch.equal(summed, x + r), "the second output is x + residual"
    assert torch.allclose(normed, rms_norm(x + r, w, 1e-5)), "the first output is the norm of x + residual"
    layer = RMSNormFused(16, 1e-5)
    layer.weight = w
    first, carried = layer(x)
    assert torch.equal(carried, x), "with no residual yet, x itself is carried as the residual"
    assert torch.allclose(first, rms_norm(x, w, 1e-5)), "with no residual yet, the layer normalises x"
    small, small_r = rows_of_scales([1e-3, 2e-3, 1e-2], 16), rows_of_scales([1e-3, 1e-3, 1e-2], 16, seed=1)
    err = rel_err(fused_add_rms_norm(small, small_r, w, 1e-5)[0], rms_norm_float64(small + small_r, w, 1e-5))
    assert err < 1e-6, f"fused norm of small rows (where eps matters) off by {err:.2e} (relative)"


@pytest.mark.stubs("silu_and_mul")
def test_silu_and_mul():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 2 * 24, generator=g, dtype=torch.float64)
    gate, up = x[:, :24], x[:, 24:]
    assert torch.allclose(silu_and_mul(x), gate / (1 + torch.exp(-gate)) * up), "silu(first half) * second half"


@pytest.mark.stubs("apply_rotary_emb")
def test_rotation_preserves_norm_and_relative_angle():
    g = torch.Generator().manual_seed(4)
    rope = RotaryEmbedding(head_dim=32, max_position=64, base=10000.0)
    q, k = torch.randn(1, 2, 32, generator=g), torch.randn(1, 2, 32, generator=g)
    q_rot, k_rot = rope(torch.tensor([5]), q, k)
    assert torch.allclose(q_rot.norm(dim=-1), q.norm(dim=-1), atol=1e-5), "a rotation keeps every head's length"
    # <rot(q, m), rot(k, n)> depends only on m - n: that is what makes RoPE a *relative* encoding.
    scores = []
    for m, n in [(7, 3), (20, 16), (40, 36)]:
        qm, _ = rope(torch.tensor([m]), q, q)
        _, kn = rope(torch.tensor([n]), k, k)
        scores.append((qm * kn).sum(-1))
    # float32 angles m * theta carry an error ~1e-7 * m: the scores (|q||k| ~ 35) agree within ~2e-6, 1e-4 is ample.
    assert torch.allclose(scores[0], scores[1], atol=1e-4) and torch.allclose(scores[0], scores[2], atol=1e-4), \
        f"scores at offset 4 from positions 3, 16, 36: {[sc.tolist() for sc in scores]}"


@pytest.mark.stubs("apply_rotary_emb")
def test_rope_matches_hf():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    g = torch.Generator().manual_seed(5)
    rope = RotaryEmbedding(head_dim=32, max_position=128, base=10000.0)
    positions = torch.tensor([0, 1, 2, 50, 127])
    q, k = torch.randn(5, 4, 32, generator=g), torch.randn(5, 2, 32, generator=g)
    ours_q, ours_k = rope(positions, q, k)
    inv = default_inv_freq(32, 10000.0)
    angles = torch.outer(positions.float(), inv)
    emb = torch.cat([angles, angles], -1)
    hf_q, hf_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], emb.cos()[None], emb.sin()[None])
    for name, ours, hf in ("q", ours_q, hf_q), ("k", ours_k, hf_k):
        err = rel_err(ours, hf[0].transpose(0, 1))
        assert err < 1e-6, f"rotated {name} differs from HF's by {err:.2e} (relative)"
    assert rotate_half(torch.arange(4.0)).tolist() == [-2.0, -3.0, 0.0, 1.0], "rotate_half([x1 | x2]) = [-x2 | x1]"


# The models' own bases: the tiny fixtures 1e4, SmolLM2 1e5, Llama 3 5e5 (with its scaling), Qwen3 1e6.
@pytest.mark.stubs("apply_rotary_emb", "llama3_inv_freq")
@pytest.mark.parametrize("base,scaling", [(1e4, None), (1e5, None), (5e5, LLAMA3), (1e6, None)])
def test_rope_uses_its_base_like_hf(base, scaling):
    """HF's own rotary embedding, built from a config with this rope_theta, against ours built with base=theta."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    rope_parameters = {"rope_type": "default", "rope_theta": base} if scaling is None else dict(scaling, rope_theta=base)
    config = LlamaConfig(hidden_size=128, num_attention_heads=4, head_dim=32, max_position_embeddings=512,
                         rope_parameters=rope_parameters)
    positions = torch.tensor([0, 1, 7, 63, 200, 511])
    g = torch.Generator().manual_seed(6)
    q, k = torch.randn(6, 4, 32, generator=g), torch.randn(6, 2, 32, generator=g)
    cos, sin = LlamaRotaryEmbedding(config)(q, positions[None])
    hf_q, hf_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    ours_q, ours_k = RotaryEmbedding(32, 512, base, scaling)(positions, q, k)
    for name, ours, hf in ("q", ours_q, hf_q), ("k", ours_k, hf_k):
        for row, pos in enumerate(positions.tolist()):
            err = rel_err(ours[row], hf[0, :, row])
            # The same float32 operations: equal here; 1e-6 leaves room for a cos/sin a few ulps apart.
            assert err < 1e-6, f"rope_theta={base:g}: rotated {name} at position {pos} differs from HF's by {err:.2e}"


@pytest.mark.stubs("llama3_inv_freq")
def test_llama3_scaling_matches_hf():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=128, num_attention_heads=4, head_dim=32, max_position_embeddings=512,
                         rope_scaling=dict(LLAMA3, rope_theta=10000.0))
    hf_inv, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    ours = llama3_inv_freq(default_inv_freq(32, 10000.0), LLAMA3)
    base = default_inv_freq(32, 10000.0)
    assert rel_err(ours, hf_inv) < 1e-6, f"llama3 frequencies differ from HF's by {rel_err(ours, hf_inv):.2e}"
    assert not torch.allclose(ours, base), "the fixture's scaling must actually change some frequencies"
    assert torch.allclose(ours[:2], base[:2]), "high frequencies (short wavelengths) are kept"
    assert torch.allclose(ours[-1], base[-1] / 8.0), "the lowest frequency is divided by factor"


@pytest.mark.stubs("LinearQKVMerged.forward")
def test_qkv_merged_splits_in_order():
    layer = LinearQKVMerged(hidden_size=8, head_dim=4, num_qo_heads=4, num_kv_heads=2)
    assert tuple(layer.weight.shape) == (16 + 8 + 8, 8), f"merged weight of shape {tuple(layer.weight.shape)}"
    layer.weight = torch.cat([torch.full((16, 8), 1.0), torch.full((8, 8), 2.0), torch.full((8, 8), 3.0)])
    q, k, v = layer(torch.ones(3, 8))
    shapes = [tuple(t.shape) for t in (q, k, v)]
    assert shapes == [(3, 16), (3, 8), (3, 8)], f"q, k, v shapes {shapes}"
    values = [t.unique().tolist() for t in (q, k, v)]
    assert values == [[8.0], [16.0], [24.0]], f"q, k, v come from rows 0-15, 16-23, 24-31: got values {values}"


def test_state_dict_names_and_loading():
    class Block(BaseOP):
        def __init__(self):
            self.norm = RMSNorm(4)
            self.layers = OPList([RMSNorm(4), RMSNorm(4)])
            self._private = torch.zeros(3)

    block = Block()
    assert sorted(block.state_dict()) == ["layers.0.weight", "layers.1.weight", "norm.weight"]
    new = {k: torch.full((4,), float(i)) for i, k in enumerate(sorted(block.state_dict()))}
    assert block.load_state_dict(new) == set(new), "load_state_dict returns the names it loaded"
    assert block.norm.weight.tolist() == [2.0] * 4, f"norm.weight is {block.norm.weight.tolist()}"
    with pytest.raises(ValueError):
        block.load_state_dict({**new, "norm.weight": torch.zeros(5)})
    with pytest.raises(KeyError):
        block.load_state_dict({"norm.weight": torch.zeros(4)})


def test_unknown_rope_type_is_refused():
    with pytest.raises(ValueError):
        RotaryEmbedding(32, 16, 10000.0, {"rope_type": "yarn", "factor": 2.0})
    assert math.isclose(float(default_inv_freq(32, 10000.0)[0]), 1.0), "the first frequency is base^0 = 1"
