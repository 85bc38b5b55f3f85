"""The Llama decoder (also the body of Qwen3, which only adds q/k norms)."""

from __future__ import annotations

import torch

from minisgl.core import get_global_ctx
from minisgl.layers.base import BaseOP, OPList
from minisgl.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from minisgl.layers.norm import RMSNormFused
from minisgl.layers.rotary import RotaryEmbedding
from minisgl.models.base import BaseLLMModel, last_token_indices
from minisgl.models.config import ModelConfig
from minisgl.models.utils import GatedMLP, RopeAttn


class LlamaDecoderLayer(BaseOP):
    def __init__(self, config: ModelConfig, layer_id: int, rotary: RotaryEmbedding, qk_norm: bool) -> None:
        self.input_layernorm = RMSNormFused(config.hidden_size, config.rms_norm_eps)
        self.self_attn = RopeAttn(config, layer_id, rotary, qk_norm)
        self.post_attention_layernorm = RMSNormFused(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, positions: torch.Tensor):
        """Pre-norm block. `residual` carries the running sum so each add fuses into the next norm."""
        # TODO(ch03): norm (fusing the pending residual add), attention, norm again (fusing the attention's
        # residual add), MLP. Return (mlp output, residual): the caller adds them at the next norm.
        raise NotImplementedError("TODO(ch03): LlamaDecoderLayer.forward")


class LlamaModel(BaseOP):
    def __init__(self, config: ModelConfig, qk_norm: bool) -> None:
        r = config.rotary
        self._rotary = RotaryEmbedding(r.head_dim, r.max_position, r.base, r.scaling)
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = OPList([LlamaDecoderLayer(config, i, self._rotary, qk_norm) for i in range(config.num_layers)])
        self.norm = RMSNormFused(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x, residual = self.embed_tokens(input_ids), None
        for layer in self.layers:
            x, residual = layer(x, residual, positions)
        return self.norm(x, residual)[0]


class LlamaForCausalLM(BaseLLMModel):
    qk_norm = False

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.model = LlamaModel(config, self.qk_norm)
        tie = self.model.embed_tokens if config.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tie_to=tie)

    def forward(self) -> torch.Tensor:
        batch = get_global_ctx().batch
        hidden = self.model(batch.input_ids, batch.positions)
        # Only each request's last token is sampled: skip the LM head for the others.
        # In the model's dtype: the sampler takes a greedy argmax as it is and casts only what it samples.
        return self.lm_head(hidden[last_token_indices(batch)])
