"""Chapter 3: model classes and weight loading; logits and greedy output equal Hugging Face's."""

from __future__ import annotations

import pytest
import torch

from helpers import MODEL_NAMES, assert_close, hf_greedy, hf_logits, model_path, prompt_ids
from minisgl.core import Batch, Context, Req, SamplingParams, set_global_ctx
from minisgl.models import ModelConfig, load_model
from minisgl.models.register import create_model, get_model_class
from minisgl.models.weight import iter_safetensors, merge_weights

MODEL_STUBS = ("RopeAttn.forward", "LlamaDecoderLayer.forward", "merge_weights")


def full_forward(model, ids: list[int]) -> torch.Tensor:
    """Logits of the last token, recomputing the whole sequence (this chapter has no KV cache yet)."""
    req = Req(torch.tensor(ids, dtype=torch.int32), 0, 0, 1, 0, SamplingParams(max_tokens=1))
    batch = Batch([req], "prefill")
    batch.input_ids = torch.tensor(ids)
    batch.positions = torch.arange(len(ids))
    ctx = Context()
    set_global_ctx(ctx)
    with ctx.forward_batch(batch):
        return model.forward()[0]


@pytest.fixture(scope="module", params=MODEL_NAMES)
def loaded(request):
    model, config = load_model(model_path(request.param))
    return request.param, model, config


def test_config_reads_the_fixtures():
    qwen = ModelConfig.from_path(model_path("tiny-qwen3"))
    llama = ModelConfig.from_path(model_path("tiny-llama"))
    smol = ModelConfig.from_path(model_path("smollm2"))
    assert qwen.architecture == "Qwen3ForCausalLM" and qwen.tie_word_embeddings
    assert llama.architecture == "LlamaForCausalLM" and llama.rotary.scaling["rope_type"] == "llama3"
    assert smol.num_layers == 30 and smol.num_kv_heads == 3 and smol.head_dim == 64


@pytest.mark.stubs("merge_weights")
def test_merge_weights_in_any_order():
    q, k, v = torch.full((4, 2), 1.0), torch.full((2, 2), 2.0), torch.full((2, 2), 3.0)
    gate, up = torch.full((3, 2), 4.0), torch.full((3, 2), 5.0)
    stream = [("m.layers.0.self_attn.v_proj.weight", v), ("m.layers.0.mlp.up_proj.weight", up),
              ("m.norm.weight", torch.ones(2)), ("m.layers.0.self_attn.q_proj.weight", q),
              ("m.layers.0.mlp.gate_proj.weight", gate), ("m.layers.0.self_attn.k_proj.weight", k)]
    merged = dict(merge_weights(iter(stream)))
    assert sorted(merged) == ["m.layers.0.mlp.gate_up_proj.weight", "m.layers.0.self_attn.qkv_proj.weight",
                              "m.norm.weight"]
    for key, parts in (("self_attn.qkv_proj", "q 1s, k 2s, v 3s"), ("mlp.gate_up_proj", "gate 4s, up 5s")):
        rows = merged[f"m.layers.0.{key}.weight"][:, 0].tolist()
        want = (torch.cat([q, k, v]) if "qkv" in key else torch.cat([gate, up]))[:, 0].tolist()
        assert rows == want, f"{key} stacks its parts by rows in order ({parts}): its rows hold {rows}, expected {want}"


@pytest.mark.stubs("merge_weights")
def test_merge_weights_reports_missing_parts():
    with pytest.raises(ValueError, match="qkv_proj"):
        list(merge_weights(iter([("a.self_attn.q_proj.weight", torch.ones(1, 1))])))


@pytest.mark.stubs("merge_weights")
def test_every_checkpoint_weight_is_used(loaded):
    name, model, config = loaded
    checkpoint = [n for n, _ in iter_safetensors(model_path(name))]
    ours = model.state_dict()
    assert any(n.endswith("self_attn.q_proj.weight") for n in checkpoint)
    assert sum(n.endswith("qkv_proj.weight") for n in ours) == config.num_layers
    assert sum(n.endswith("gate_up_proj.weight") for n in ours) == config.num_layers
    # Per layer q, k, v merge into one tensor and gate, up into one (3 fewer); a tied head owns no weight.
    dropped_head = "lm_head.weight" in checkpoint and config.tie_word_embeddings
    want = len(checkpoint) - 3 * config.num_layers - dropped_head
    assert len(ours) == want, f"{name}: the model has {len(ours)} weights, expected {want} from {len(checkpoint)} in the checkpoint"


@pytest.mark.stubs(*MODEL_STUBS)
def test_logits_match_hf(loaded):
    name, model, _ = loaded
    for i, ids in enumerate(prompt_ids(name, 2)):
        assert_close(full_forward(model, ids), hf_logits(name, ids)[-1], 1e-4, f"{name}: prompt {i}'s last logits")


@pytest.mark.stubs(*MODEL_STUBS)
def test_greedy_by_recomputation_matches_hf(loaded):
    name, model, _ = loaded
    n = 8
    for ids in prompt_ids(name, 2):
        seq = list(ids)
        for _ in range(n):
            seq.append(int(full_forward(model, seq).argmax()))
        assert seq[len(ids):] == hf_greedy(name, ids, n), f"{name}: greedy output differs from HF"


def hf_and_ours(name: str):
    """HF's model and ours with the same weights, merged here by hand (independent of merge_weights)."""
    from helpers import hf_model

    hf = hf_model(name)
    state = {k: v.detach() for k, v in hf.state_dict().items()}
    for key in [k for k in state if "q_proj" in k or "gate_proj" in k]:
        parts = ("q_proj", "k_proj", "v_proj") if "q_proj" in key else ("gate_proj", "up_proj")
        merged = "qkv_proj" if "q_proj" in key else "gate_up_proj"
        state[key.replace(parts[0], merged)] = torch.cat([state.pop(key.replace(parts[0], p)) for p in parts])
    config = ModelConfig.from_path(model_path(name))
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    ours = create_model(config)
    ours.load_state_dict(state)
    return hf, ours


def capture_layer0(hf, module_name: str, ids: list[int]):
    """Input hidden states and output of HF's layer-0 submodule during a full forward pass."""
    seen = {}
    module = hf.model.layers[0] if module_name == "layer" else hf.model.layers[0].self_attn

    def hook(mod, args, kwargs, output):
        seen["x"] = (args[0] if args else kwargs["hidden_states"])[0].detach()
        seen["y"] = (output[0] if isinstance(output, tuple) else output)[0].detach()

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.inference_mode():
            hf(torch.tensor([ids]))
    finally:
        handle.remove()
    return seen["x"], seen["y"]


def run_in_context(ids: list[int], fn):
    req = Req(torch.tensor(ids, dtype=torch.int32), 0, 0, 1, 0, SamplingParams(max_tokens=1))
    batch = Batch([req], "prefill")
    batch.input_ids, batch.positions = torch.tensor(ids), torch.arange(len(ids))
    ctx = Context()
    set_global_ctx(ctx)
    with ctx.forward_batch(batch), torch.inference_mode():
        return fn(batch.positions)


@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama"])
@pytest.mark.stubs("RopeAttn.forward")
def test_attention_block_matches_hf(name):
    hf, ours = hf_and_ours(name)
    ids = prompt_ids(name, 1)[0]
    x, y = capture_layer0(hf, "attn", ids)
    got = run_in_context(ids, lambda pos: ours.model.layers[0].self_attn(x, pos))
    assert_close(got, y, 1e-5, f"{name}: layer 0's attention output against HF's", row="token")


@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama"])
@pytest.mark.stubs("LlamaDecoderLayer.forward")
def test_decoder_layer_matches_hf(name):
    hf, ours = hf_and_ours(name)
    ids = prompt_ids(name, 1)[0]
    x, y = capture_layer0(hf, "layer", ids)
    out, residual = run_in_context(ids, lambda pos: ours.model.layers[0](x, None, pos))
    got = out + residual  # the layer leaves its final residual add to the next norm
    assert_close(got, y, 1e-5, f"{name}: layer 0's output (out + residual) against HF's", row="token")


def test_unknown_architecture_is_refused():
    with pytest.raises(ValueError, match="unknown model architecture 'GPT2LMHeadModel'"):
        get_model_class("GPT2LMHeadModel")
    with pytest.raises(ValueError, match="no architecture"):
        ModelConfig.from_dict({"architectures": []})


def test_not_a_model_folder(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        load_model(tmp_path)
