"""Quantization (chapter 30): weights and the KV cache stored in 8 bits, with the scales that bring them back."""

from minisgl.quant.fp8 import FP8_MAX, fp8_linear, fp8_scale, quantize_fp8
from minisgl.quant.int8 import int8_linear, quantize_int8_per_channel
from minisgl.quant.methods import KV_CACHE_DTYPES, QUANT_METHODS, check_quant_flags, kv_storage_dtype

__all__ = ["FP8_MAX", "KV_CACHE_DTYPES", "QUANT_METHODS", "check_quant_flags", "fp8_linear", "fp8_scale",
           "int8_linear", "kv_storage_dtype", "quantize_fp8", "quantize_int8_per_channel"]
