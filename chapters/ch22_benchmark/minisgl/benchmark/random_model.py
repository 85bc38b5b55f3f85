"""A Qwen3-0.6B-shaped model with random bf16 weights, made on the spot: the benchmark's model.

Speed does not depend on the values of the weights, only on their shapes, so random weights measure the
same thing as the real checkpoint without downloading it. 28 layers, hidden 1024, 16 query and 8 KV heads
of 128, MLP 3072, a vocabulary of 151,936 with tied embeddings: 596M parameters, 1.19 GB in bf16.

Its tokenizer is made up too (stand_in_tokenizer): every id decodes to a short word, so a server streams text for
every token, as it would with the real vocabulary. Without one, every token would decode to nothing, the
detokenizer would hold every stream's text back waiting for a whole character, and the server would be measured
decoding ever longer windows that no real model produces.
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
    stand_in_tokenizer(config.vocab_size).save_pretrained(tmp)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, path)
    return path


def _word(i: int) -> str:
    """A word of lowercase letters for id i, different for every i (bijective base 26)."""
    letters = ""
    while True:
        i, r = divmod(i, 26)
        letters = chr(ord("a") + r) + letters
        if i == 0:
            return letters
        i -= 1


def stand_in_tokenizer(vocab_size: int):
    """A fast tokenizer of `vocab_size` ids: the 256 byte-level symbols (any text encodes), then " " + a word for
    each further id; decoding is the Rust tokenizer's, as for a real BPE vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    space = "\u0120"  # the byte-level symbol of " "
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    for i in range(len(vocab), vocab_size):
        vocab[space + _word(i)] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False)
