"""ModelConfig: the few numbers of a Hugging Face config.json that the engine needs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RotaryConfig:
    head_dim: int
    max_position: int
    base: float
    scaling: dict | None


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    attention_bias: bool
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...]
    rotary: RotaryConfig
    # Mixture of experts (chapter 20); a dense model keeps the defaults.
    num_experts: int = 0
    num_experts_per_tok: int = 0  # top-k: experts each token uses
    moe_intermediate_size: int = 0  # one expert's intermediate size
    norm_topk_prob: bool = False  # rescale a token's top-k routing weights to sum to 1
    moe_layers: tuple[int, ...] = ()  # the layers whose MLP is a mixture of experts

    @classmethod
    def from_dict(cls, cfg: dict) -> ModelConfig:
        architectures = cfg.get("architectures") or []
        if not architectures:
            raise ValueError("config.json names no architecture ('architectures' is empty)")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {cfg['hidden_act']!r} (only silu)")
        # transformers 5 writes rope settings into `rope_parameters`; older configs use rope_theta/rope_scaling.
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        if "type" in rope and "rope_type" not in rope:
            rope["rope_type"] = rope["type"]
        base = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        scaling = rope if rope.get("rope_type", "default") != "default" else None
        num_heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // num_heads
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        max_pos = cfg.get("max_position_embeddings", 4096)
        # transformers 5 writes num_experts as num_local_experts; released Qwen3-MoE configs say num_experts.
        num_experts = cfg.get("num_experts", cfg.get("num_local_experts", 0)) or 0
        step, dense = cfg.get("decoder_sparse_step", 1) or 1, set(cfg.get("mlp_only_layers") or [])
        moe_layers = tuple(i for i in range(cfg["num_hidden_layers"])
                           if num_experts > 0 and i not in dense and (i + 1) % step == 0)
        return cls(
            architecture=architectures[0],
            num_layers=cfg["num_hidden_layers"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_qo_heads=num_heads,
            num_kv_heads=cfg.get("num_key_value_heads", num_heads),
            head_dim=head_dim,
            vocab_size=cfg["vocab_size"],
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", False)),
            max_position_embeddings=max_pos,
            eos_token_ids=eos_ids,
            rotary=RotaryConfig(head_dim=head_dim, max_position=max_pos, base=float(base), scaling=scaling),
            num_experts=num_experts,
            num_experts_per_tok=cfg.get("num_experts_per_tok", 0) if num_experts else 0,
            moe_intermediate_size=cfg.get("moe_intermediate_size", 0) if num_experts else 0,
            norm_topk_prob=bool(cfg.get("norm_topk_prob", False)),
            moe_layers=moe_layers,
        )

    @classmethod
    def from_path(cls, model_path: str | Path) -> ModelConfig:
        path = Path(model_path) / "config.json"
        if not path.exists():
            raise ValueError(f"{model_path} is not a model folder: it has no config.json")
        cfg = json.loads(path.read_text())
        # Chat models often list extra stop tokens (e.g. <|im_end|>) in generation_config.json only.
        gen_path = Path(model_path) / "generation_config.json"
        if gen_path.exists():
            gen_eos = json.loads(gen_path.read_text()).get("eos_token_id")
            if gen_eos is not None:
                ids = cfg.get("eos_token_id")
                ids = [] if ids is None else ([ids] if isinstance(ids, int) else list(ids))
                extra = gen_eos if isinstance(gen_eos, list) else [gen_eos]
                cfg["eos_token_id"] = ids + [i for i in extra if i not in ids]
        return cls.from_dict(cfg)
