"""Qwen3-MoE (Qwen3-30B-A3B and kin): Qwen3's decoder with a mixture of experts in place of the dense MLP.

Each MoE block has a router (`gate`, one linear layer giving a logit per expert) and the experts (MoELayer).
Layers listed in the config's mlp_only_layers, or skipped by decoder_sparse_step, keep a dense MLP.
"""

from __future__ import annotations

import torch

from minisgl.layers.base import BaseOP, OPList
from minisgl.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from minisgl.layers.linear import LinearReplicated
from minisgl.layers.moe import MoELayer
from minisgl.layers.norm import RMSNormFused
from minisgl.layers.rotary import RotaryEmbedding
from minisgl.models.config import ModelConfig
from minisgl.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaModel
from minisgl.models.utils import GatedMLP, RopeAttn


class Qwen3MoeSparseBlock(BaseOP):
    """Router then experts: names as in the checkpoint (mlp.gate.weight, mlp.experts.*)."""

    def __init__(self, config: ModelConfig) -> None:
        self.gate = LinearReplicated(config.hidden_size, config.num_experts)  # replicated: every rank routes alike
        self.experts = MoELayer(config.num_experts, config.num_experts_per_tok, config.hidden_size,
                                config.moe_intermediate_size, config.norm_topk_prob)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.experts(x, self.gate(x))


class Qwen3MoeDecoderLayer(LlamaDecoderLayer):
    """The Llama/Qwen3 block (its forward is inherited); only the MLP differs."""

    def __init__(self, config: ModelConfig, layer_id: int, rotary: RotaryEmbedding) -> None:
        self.input_layernorm = RMSNormFused(config.hidden_size, config.rms_norm_eps)
        self.self_attn = RopeAttn(config, layer_id, rotary, qk_norm=True)
        self.post_attention_layernorm = RMSNormFused(config.hidden_size, config.rms_norm_eps)
        self.mlp = Qwen3MoeSparseBlock(config) if layer_id in config.moe_layers else GatedMLP(config)


class Qwen3MoeModel(LlamaModel):
    def __init__(self, config: ModelConfig) -> None:
        r = config.rotary
        self._rotary = RotaryEmbedding(r.head_dim, r.max_position, r.base, r.scaling)
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = OPList([Qwen3MoeDecoderLayer(config, i, self._rotary) for i in range(config.num_layers)])
        self.norm = RMSNormFused(config.hidden_size, config.rms_norm_eps)


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    def __init__(self, config: ModelConfig) -> None:
        if not config.moe_layers:
            raise ValueError("Qwen3MoeForCausalLM needs num_experts > 0 and at least one sparse layer")
        self.config = config
        self.model = Qwen3MoeModel(config)
        tie = self.model.embed_tokens if config.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tie_to=tie)
