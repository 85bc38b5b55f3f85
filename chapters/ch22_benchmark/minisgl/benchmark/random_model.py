"""A Qwen3-0.6B-shaped model with random bf16 weights, made on the spot: the benchmark's model.

Speed does not depend on the values of the weights, only on their shapes, so random weights measure the
same thing as the real checkpoint without downloading it. 28 layers, hidden 1024, 16 query and 8 KV heads
of 128, MLP 3072, a vocabulary of 151,936 with tied embeddings: 596M parameters, 1.19 GB in bf16.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

QWEN3_0_6B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                  tie_word_embeddings=True, rope_theta=1e6)


def make_model(path: str | Path, device: str = "cuda", seed: int = 0, **overrides) -> Path:
    """Save the model to `path` unless a model is there already; returns the path.

    `overrides` change the shape (tests make a tiny one). Written to a temporary folder first and renamed,
    so an interrupted run never leaves half a model behind."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    path = Path(path)
    if (path / "config.json").exists():
        return path
    config = Qwen3Config(**{**QWEN3_0_6B, **overrides})
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, path)
    return path
