"""EngineConfig: everything that fixes the engine's shape at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from minisgl.attention import BACKENDS
from minisgl.lora import target_modules
from minisgl.quant import check_quant_flags
from minisgl.quant.checkpoint import resolve_quantization

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class EngineConfig:
    model_path: str | Path
    device: str = "auto"  # auto: cuda when available, else cpu
    dtype: str = "auto"  # auto: bfloat16 on cuda, float32 on cpu
    max_running_reqs: int = 16  # rows of the page table: requests in flight at once
    max_seq_len: int | None = None  # prompt + output tokens of one request; default min(model limit, 4096)
    page_size: int = 1
    cache_type: str = "radix"  # "radix": share prompt prefixes between requests; "naive": share nothing
    attention_backend: str = "auto"  # "torch", "triton", "fa", or "auto" (see minisgl/attention/__init__.py)
    num_pages: int | None = None  # KV pool size; default: sized from memory (see Engine._num_kv_pages)
    memory_ratio: float = 0.9  # cuda: share of the memory left after the weights that the KV pool may use
    cpu_kv_cache_mb: int = 256  # cpu: memory for the KV pool
    seed: int = 0
    # Decode batches up to this size replay a CUDA graph (chapter 18). None: min(256, max_running_reqs) on CUDA
    # and 0 (off) on the CPU; 0: off. On the CPU a positive value runs the same padding with eager replay.
    cuda_graph_max_bs: int | None = None
    # Chapter 30 (SGLang's and vLLM's flag names): quantize the linear layers' weights at load time ("int8wo",
    # "fp8", "fp8-tensor"; None: off, or what a pre-quantized checkpoint was made with) and store the KV cache in FP8
    # ("fp8_e4m3"; "auto": the model's dtype).
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    # Chapter 31 (SGLang's flag names): serve LoRA adapters. lora_paths: name -> PEFT adapter folder, loaded at
    # start; max_loras_per_batch: the engine's adapter slots (the most distinct adapters in one batch); every
    # adapter's rank must be <= max_lora_rank and its modules among lora_target_modules (HF names or q, k, v, o,
    # gate, up, down), which fix the slots' memory.
    enable_lora: bool = False
    lora_paths: dict[str, str] | None = None
    max_loras_per_batch: int = 8
    max_lora_rank: int = 16
    lora_target_modules: tuple[str, ...] | str = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                   "down_proj")

    def __post_init__(self) -> None:
        if self.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.dtype == "auto":
            self.dtype = "bfloat16" if self.device.startswith("cuda") else "float32"
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)} or 'auto', got {self.dtype!r}")
        if self.max_running_reqs < 1:
            raise ValueError(f"max_running_reqs must be >= 1, got {self.max_running_reqs}")
        for name in ("max_seq_len", "num_pages"):  # None means "auto"; 0 is no size at all, not a default
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None (auto), got {value!r}")
        if self.attention_backend not in BACKENDS:
            raise ValueError(f"attention_backend must be one of {BACKENDS}, got {self.attention_backend!r}")
        if self.cache_type not in ("radix", "naive"):
            raise ValueError(f"cache_type must be 'radix' or 'naive', got {self.cache_type!r}")
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        if self.cuda_graph_max_bs is None:
            self.cuda_graph_max_bs = min(256, self.max_running_reqs) if self.device.startswith("cuda") else 0
        if self.cuda_graph_max_bs < 0:
            raise ValueError(f"cuda_graph_max_bs must be >= 0 (0: no CUDA graphs), got {self.cuda_graph_max_bs}")
        if not 0 < self.memory_ratio <= 1:
            raise ValueError(f"memory_ratio must be in (0, 1], got {self.memory_ratio}")
        check_quant_flags(self.quantization, self.kv_cache_dtype)
        self.quantization = resolve_quantization(self.model_path, self.quantization)
        self._check_lora()

    def _check_lora(self) -> None:
        """Chapter 31: ValueError naming the LoRA flag that is wrong."""
        if not isinstance(self.enable_lora, bool):
            raise ValueError(f"enable_lora must be True or False, got {self.enable_lora!r}")
        if self.lora_paths and not self.enable_lora:
            raise ValueError("lora_paths needs enable_lora=True (--enable-lora)")
        if self.lora_paths is not None and not isinstance(self.lora_paths, dict):
            raise ValueError(f"lora_paths must map adapter names to folders, got {self.lora_paths!r}")
        for name in ("max_loras_per_batch", "max_lora_rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.lora_target_modules = target_modules(self.lora_target_modules)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]
