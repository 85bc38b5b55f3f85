"""Which class implements which Hugging Face architecture name."""

from __future__ import annotations

from minisgl.models.base import BaseLLMModel
from minisgl.models.config import ModelConfig
from minisgl.models.llama import LlamaForCausalLM
from minisgl.models.qwen3 import Qwen3ForCausalLM
from minisgl.models.qwen3_moe import Qwen3MoeForCausalLM

MODEL_REGISTRY: dict[str, type[BaseLLMModel]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
}


def get_model_class(architecture: str) -> type[BaseLLMModel]:
    if architecture not in MODEL_REGISTRY:
        known = ", ".join(sorted(MODEL_REGISTRY))
        raise ValueError(f"unknown model architecture {architecture!r} (supported: {known})")
    return MODEL_REGISTRY[architecture]


def create_model(config: ModelConfig) -> BaseLLMModel:
    return get_model_class(config.architecture)(config)
