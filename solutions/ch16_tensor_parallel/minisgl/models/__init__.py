"""Models and how to load them."""

from __future__ import annotations

from pathlib import Path

import torch

from minisgl.distributed import get_tp_info
from minisgl.models.base import BaseLLMModel
from minisgl.models.config import ModelConfig
from minisgl.models.register import create_model
from minisgl.models.weight import load_hf_weight


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
    state = load_hf_weight(model_path, config.tie_word_embeddings, config, get_tp_info())  # this rank's slices
    used = model.load_state_dict(state)
    unused = sorted(set(state) - used)
    if unused:
        raise ValueError(f"checkpoint weights the model does not use: {unused[:5]}")
    return model, config


__all__ = ["BaseLLMModel", "ModelConfig", "create_model", "load_hf_weight", "load_model"]
