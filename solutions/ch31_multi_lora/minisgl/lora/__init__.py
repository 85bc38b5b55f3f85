"""Chapter 31: many LoRA adapters served from one base model, mixed in one batch."""

from minisgl.lora.adapter import TARGET_MODULES, LoraAdapter, load_adapter, target_modules
from minisgl.lora.delta import LoraTarget, lora_delta, lora_delta_torch
from minisgl.lora.prefix import prefix_key

__all__ = ["TARGET_MODULES", "LoraAdapter", "LoraTarget", "load_adapter", "lora_delta", "lora_delta_torch",
           "prefix_key", "target_modules"]
