"""Qwen3 (dense): the Llama decoder plus an RMSNorm on every q and k head before RoPE."""

from __future__ import annotations

from minisgl.models.llama import LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    qk_norm = True
