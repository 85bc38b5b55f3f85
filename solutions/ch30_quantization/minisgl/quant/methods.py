"""The flags' values (SGLang's and vLLM's names) and the combinations the engine refuses."""

from __future__ import annotations

import torch

# --quantization: "int8wo" is weight-only INT8 with per-channel scales (the name of SGLang's torchao config,
# --torchao-config int8wo); "fp8" is W8A8 FP8 with per-channel weight scales and per-token activation scales
# (SGLang's and vLLM's --quantization fp8 quantize a bf16 checkpoint this way at load time); "fp8-tensor" the same
# with one scale per weight tensor.
QUANT_METHODS = ("int8wo", "fp8", "fp8-tensor")
# --kv-cache-dtype: "auto" stores the KV in the model's dtype; "fp8_e4m3" in float8_e4m3fn with one scale per
# layer for the keys and one for the values (1.0, as SGLang and vLLM use without calibrated scales).
KV_CACHE_DTYPES = ("auto", "fp8_e4m3")


def check_quant_flags(quantization: str | None, kv_cache_dtype: str) -> None:
    """ValueError naming the flag for a value the engine does not know."""
    if quantization is not None and quantization not in QUANT_METHODS:
        raise ValueError(f"quantization must be one of {QUANT_METHODS} or None, got {quantization!r}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {kv_cache_dtype!r}")


def kv_storage_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    return torch.float8_e4m3fn if kv_cache_dtype == "fp8_e4m3" else model_dtype
