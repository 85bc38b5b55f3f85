"""Models and how to load them.

Chapter 30: a checkpoint whose config.json carries a compressed-tensors quantization_config is pre-quantized: its
linear layers arrive as 8-bit codes with scales (minisgl/quant/checkpoint.py) and go into the layers as they are.
"""

from __future__ import annotations

from pathlib import Path

import torch

from minisgl.distributed import get_tp_info
from minisgl.models.base import BaseLLMModel
from minisgl.models.config import ModelConfig
from minisgl.models.register import create_model
from minisgl.models.weight import ROW_PARALLEL, iter_safetensors, load_hf_weight, merge_weights, shard_weight
from minisgl.quant.checkpoint import checkpoint_quantization, place_quantized, quantized_tensors


def load_model(model_path: str | Path, dtype: torch.dtype = torch.float32,
               device: str | torch.device = "cpu") -> tuple[BaseLLMModel, ModelConfig]:
    """Build the model for a Hugging Face folder and load its weights (this rank's slices under tensor
    parallelism); checks that every weight is used."""
    config = ModelConfig.from_path(model_path)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = create_model(config)
    finally:
        torch.set_default_dtype(previous)
    method = checkpoint_quantization(model_path)
    if method is None:
        state = load_hf_weight(model_path, config.tie_word_embeddings, config, get_tp_info())  # this rank's slices
    else:
        state = load_quantized_weight(model_path, config, method)
        place_quantized(model, state, method)
    used = model.load_state_dict(state)
    unused = sorted(set(state) - used)
    if unused:
        raise ValueError(f"checkpoint weights the model does not use: {unused[:5]}")
    return model, config


def _shard(name: str, tensor: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """This rank's slice, as for a plain checkpoint, except a row-parallel layer's scales: one per output row, and
    every rank computes every output row (a partial sum), so each keeps them all."""
    if name.endswith(".weight_scale") and name.split(".")[-2] in ROW_PARALLEL:
        return tensor
    return shard_weight(name, tensor, config, get_tp_info())


def load_quantized_weight(model_path: str | Path, config: ModelConfig, method: str) -> dict[str, torch.Tensor]:
    """The merged state dict of a pre-quantized checkpoint: codes and float32 scales [out] for the linear layers
    (q/k/v and gate/up codes and scales merged like the weights they are), this rank's slices."""
    if config.num_experts:
        raise ValueError("a pre-quantized checkpoint of a mixture-of-experts model is not supported (the experts' "
                         "grouped compute has no quantized path)")
    tensors = quantized_tensors(iter_safetensors(model_path), method)
    if get_tp_info().size > 1:
        tensors = ((name, _shard(name, t, config)) for name, t in tensors)
    state = dict(merge_weights(tensors))
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


__all__ = ["BaseLLMModel", "ModelConfig", "create_model", "load_hf_weight", "load_model"]
