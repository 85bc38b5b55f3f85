"""LoRA adapters for the course's models, written in PEFT's file layout (chapter 31).

    python -m tools.lora make --base models/tiny-qwen3 --rank 8 --targets q,k,v,o,gate,up,down --seed 1 \\
        --out models/loras/tq-a

An adapter folder holds adapter_config.json (r, lora_alpha, target_modules, ...) and adapter_model.safetensors with
one lora_A [r, in] and one lora_B [out, r] per targeted projection, under the names PEFT gives them
(base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight, ...), so `PeftModel.from_pretrained` loads it.

PEFT starts B at zero (a fresh adapter is the base model until trained). These adapters are for testing and
measuring, not trained: both A and B are random, and B is sized so the adapter's output is a given share
(`strength`) of the base projection's, enough to change greedy answers. The scale follows from the sizes: with A's
entries of variance 1/in, each of A x's r numbers is about as large as x's entries, B (A x) then has entries about
sqrt(r) * std(B) times that, while W x has entries about sqrt(in) * std(W) times it.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

SHORT = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
         "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def make_adapter(base: str | Path, out: str | Path, rank: int = 8, targets: str = "q,k,v,o,gate,up,down",
                 seed: int = 0, alpha: float | None = None, strength: float = 0.5) -> Path:
    """Write a random adapter for the model at `base` into `out` (created); returns `out`."""
    names = [t.strip() for t in targets.split(",") if t.strip()]
    bad = [t for t in names if t not in SHORT]
    if bad or not names:
        raise ValueError(f"targets: {bad or targets!r} not among {', '.join(SHORT)}")
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    alpha = float(2 * rank if alpha is None else alpha)
    scaling = alpha / rank
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    files = sorted(Path(base).glob("*.safetensors"))  # one file, or the shards of a large model
    where = {}
    for file in files:
        with safe_open(str(file), "pt") as f:
            where.update((k, file) for k in f.keys())
    if not where:
        raise ValueError(f"base: no safetensors weights in {str(base)!r}")
    layers = sorted({int(k.split(".")[2]) for k in where if k.startswith("model.layers.")})
    for i in layers:
        for t in names:
            key = f"model.layers.{i}.{SHORT[t]}.weight"
            with safe_open(str(where[key]), "pt") as f:
                w = f.get_tensor(key).float()
            n_out, n_in = w.shape
            a = torch.randn(rank, n_in, generator=gen) / math.sqrt(n_in)
            b_std = strength * w.std().item() * math.sqrt(n_in) / (scaling * math.sqrt(rank))
            b = torch.randn(n_out, rank, generator=gen) * b_std
            prefix = f"base_model.model.model.layers.{i}.{SHORT[t]}"
            tensors[f"{prefix}.lora_A.weight"] = a.contiguous()
            tensors[f"{prefix}.lora_B.weight"] = b.contiguous()
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(base), "r": rank,
        "lora_alpha": alpha, "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
        "target_modules": sorted(SHORT[t].split(".")[1] for t in names), "inference_mode": True,
        "use_rslora": False, "use_dora": False, "modules_to_save": None,
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.lora", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make", help="write a random adapter in PEFT's layout")
    make.add_argument("--base", required=True, help="the base model's folder")
    make.add_argument("--rank", type=int, default=8)
    make.add_argument("--alpha", type=float, default=None, help="lora_alpha (default 2 * rank)")
    make.add_argument("--targets", default="q,k,v,o,gate,up,down")
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--strength", type=float, default=0.5, help="the adapter's output / the base projection's")
    make.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    print(make_adapter(args.base, args.out, args.rank, args.targets, args.seed, args.alpha, args.strength))


if __name__ == "__main__":
    main()
