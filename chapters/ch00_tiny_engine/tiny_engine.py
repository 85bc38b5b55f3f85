"""A tiny LLM inference engine in one file (chapter 0).

It reads a Hugging Face model folder (config.json + *.safetensors), runs a hand-written Qwen3 / Llama
forward pass in float32 on the CPU, keeps a per-layer KV cache that grows with torch.cat, and decodes
greedily: the prompt is computed once (prefill), then every step feeds only the newest token (decode).

One sequence at a time, a cache that is copied on every step, no batching, no scheduling: each later
chapter of the course removes one of these limits. Only torch, safetensors and the standard library.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

SUPPORTED = ("Qwen3ForCausalLM", "LlamaForCausalLM")


@dataclass(frozen=True)
class Config:
    """The few numbers of config.json this engine needs."""

    arch: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    max_position: int
    tie_word_embeddings: bool
    rope: dict  # rope_type, rope_theta and, for llama3, the scaling numbers
    eos_ids: tuple[int, ...]

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> Config:
        path = Path(model_dir) / "config.json"
        if not path.exists():
            raise ValueError(f"{model_dir} is not a model folder: it has no config.json")
        cfg = json.loads(path.read_text())
        arch = (cfg.get("architectures") or ["<none>"])[0]
        if arch not in SUPPORTED:
            raise ValueError(f"unknown model architecture {arch!r} (supported: {', '.join(SUPPORTED)})")
        # transformers 5 writes rope settings into `rope_parameters`; older files use rope_theta / rope_scaling.
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        rope["rope_type"] = rope.get("rope_type", rope.get("type", "default"))
        rope["rope_theta"] = float(cfg.get("rope_theta", rope.get("rope_theta", 10000.0)))
        heads, eos = cfg["num_attention_heads"], cfg.get("eos_token_id")
        return cls(
            arch=arch,
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads", heads),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            vocab_size=cfg["vocab_size"],
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            max_position=cfg.get("max_position_embeddings", 4096),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            rope=rope,
            eos_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,)),
        )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension of x (any leading shape); weight: [x.shape[-1]]."""
    # TODO(ch00): return weight * x / sqrt(mean(x**2 over the last dim) + eps), same shape and dtype as x.
    # Compute the statistics in float32 (x.float(), torch.rsqrt) and cast back to x.dtype before
    # multiplying by weight, as Hugging Face does.
    raise NotImplementedError("TODO(ch00): rms_norm")


def rope_inv_freq(head_dim: int, rope: dict) -> torch.Tensor:
    """Rotation speed of each of the head_dim/2 pairs, [head_dim/2] float32: theta**(-2i/head_dim)."""
    inv_freq = 1.0 / (rope["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if rope["rope_type"] == "llama3":
        # Llama 3 divides the slow frequencies (wavelength > old context / low_freq_factor) by `factor`,
        # keeps the fast ones (wavelength < old context / high_freq_factor) and blends the band between.
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old_context = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif rope["rope_type"] != "default":
        raise ValueError(f"unsupported rope type {rope['rope_type']!r} (supported: default, llama3)")
    return inv_freq


def rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding. x: [tokens, heads, head_dim]; positions: [tokens] int64; inv_freq: [head_dim/2]."""
    # TODO(ch00): rotate x by its positions in the "rotate half" layout; return the same shape and dtype.
    # angles = positions.float()[:, None] * inv_freq[None, :] is [tokens, head_dim/2] (float32); concatenate
    # it with itself to [tokens, head_dim] and take cos and sin, shaped [tokens, 1, head_dim] to broadcast
    # over heads. With x1, x2 the first and second halves of the last dim, rotate_half(x) = cat(-x2, x1);
    # return x * cos + rotate_half(x) * sin. (Pair (x[..., i], x[..., i + head_dim/2]) turns by pos * inv_freq[i].)
    raise NotImplementedError("TODO(ch00): rope")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal grouped-query attention of the newest queries against every key so far.

    q: [n_new, heads, head_dim], the queries of the last n_new positions of the sequence.
    k, v: [n_total, kv_heads, head_dim], all positions so far: the cached ones, then the new ones.
    Returns [n_new, heads, head_dim].
    """
    # TODO(ch00): causal grouped-query attention against a KV cache.
    # Query i sits at position n_total - n_new + i and sees the keys at positions 0 .. its own (the whole
    # cache and the new tokens up to itself), never later ones. Query head h reads KV head
    # h // (heads // kv_heads): repeat_interleave k and v on the head axis. scores = (q . k) * head_dim**-0.5,
    # hidden positions set to -inf, softmax over the keys in float32, then the probability-weighted sum of v.
    raise NotImplementedError("TODO(ch00): attention")


class TinyEngine:
    """Greedy generation for one sequence with a hand-written Qwen3 / Llama forward (float32, CPU)."""

    def __init__(self, model_dir: str | Path) -> None:
        self.config = cfg = Config.from_dir(model_dir)
        files = sorted(Path(model_dir).glob("*.safetensors"))
        if not files:
            raise ValueError(f"{model_dir} has no *.safetensors weights")
        self.weights: dict[str, torch.Tensor] = {}
        for file in files:
            self.weights.update({name: t.float() for name, t in load_file(file).items()})
        embed = self.weights["model.embed_tokens.weight"]
        self.lm_head = embed if cfg.tie_word_embeddings else self.weights.get("lm_head.weight", embed)
        self.qk_norm = "model.layers.0.self_attn.q_norm.weight" in self.weights  # Qwen3 has it, Llama not
        self.inv_freq = rope_inv_freq(cfg.head_dim, cfg.rope)
        # The KV cache: per layer a (k, v) pair of [cached tokens, kv_heads, head_dim], or None when empty.
        self.cache: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * cfg.num_layers

    @property
    def cached_len(self) -> int:
        return 0 if self.cache[0] is None else self.cache[0][0].shape[0]

    def w(self, name: str) -> torch.Tensor:
        return self.weights[name + ".weight"]

    def linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w(name))

    def decoder_layer(self, i: int, h: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Layer i on the new tokens' hidden states h: [n_new, hidden] at positions [n_new]; returns [n_new, hidden]."""
        cfg, p = self.config, f"model.layers.{i}."
        # TODO(ch00): one pre-norm decoder layer that appends its new k, v to self.cache[i].
        # Attention: x = rms_norm(h, self.w(p + "input_layernorm"), eps); q = self.linear(x, p + "self_attn.q_proj")
        # (k_proj, v_proj likewise) viewed as [n_new, heads or kv_heads, head_dim]; if self.qk_norm (Qwen3),
        # rms_norm every head of q and k with self_attn.q_norm / k_norm; rope on q and k; self.cache[i] = the
        # cached k, v with the new ones concatenated after them (dim 0; None means empty);
        # h = h + o_proj(attention(q, all k, all v) flattened to [n_new, heads * head_dim]).
        # MLP: x = rms_norm(h, post_attention_layernorm); return h + down_proj(silu(gate_proj(x)) * up_proj(x)).
        raise NotImplementedError("TODO(ch00): TinyEngine.decoder_layer")

    def forward(self, input_ids: list[int] | torch.Tensor, start_pos: int) -> torch.Tensor:
        """Float32 logits [n_new, vocab] of the new tokens input_ids, which sit at positions start_pos, ...

        start_pos=0 starts a new sequence (the cache is emptied); otherwise start_pos must equal the number
        of cached tokens, and the new tokens attend to the cached ones.
        """
        if start_pos == 0:
            self.cache = [None] * self.config.num_layers
        elif start_pos != self.cached_len:
            raise ValueError(f"start_pos {start_pos} does not follow the {self.cached_len} cached tokens")
        ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(-1)
        positions = torch.arange(start_pos, start_pos + ids.shape[0])
        h = self.weights["model.embed_tokens.weight"][ids]
        for i in range(self.config.num_layers):
            h = self.decoder_layer(i, h, positions)
        h = rms_norm(h, self.weights["model.norm.weight"], self.config.rms_norm_eps)
        return F.linear(h, self.lm_head)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_ids: list[int] | None = None) -> list[int]:
        """Greedy continuation of prompt_ids: max_new_tokens ids, or fewer when one of eos_ids comes (kept)."""
        prompt_ids = [int(t) for t in prompt_ids]
        if not prompt_ids:
            raise ValueError("empty prompt: give at least one token id")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if bad := [t for t in prompt_ids if not 0 <= t < self.config.vocab_size]:
            raise ValueError(f"token ids outside the vocabulary [0, {self.config.vocab_size}): {bad[:5]}")
        if len(prompt_ids) + max_new_tokens > self.config.max_position:
            raise ValueError(f"prompt ({len(prompt_ids)}) + max_new_tokens ({max_new_tokens}) exceeds the "
                             f"context of {self.config.max_position} tokens")
        stop = set(eos_ids or ())
        # TODO(ch00): the greedy decode loop; return the list of new token ids.
        # Prefill: self.forward(prompt_ids, start_pos=0) once; the next token is the argmax of the last row.
        # Decode: feed only that one token (start_pos = the number of tokens already in the sequence),
        # take the argmax again, and so on. Stop after max_new_tokens tokens, or right after appending a
        # token that is in `stop` (the EOS token is part of the output).
        raise NotImplementedError("TODO(ch00): TinyEngine.generate")
