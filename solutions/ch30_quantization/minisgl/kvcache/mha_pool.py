"""MHAKVCache: one preallocated buffer for the keys and values of every layer.

Chapter 30: the buffer may hold float8_e4m3fn (--kv-cache-dtype fp8_e4m3), one byte per value instead of two or
four, so the same memory holds twice (bf16) or four times (float32) the tokens. Each layer has one scale for its keys
and one for its values: a write divides by it (and clamps to +-448, e4m3fn has no infinity), a read casts back and
multiplies by it. The scales are 1.0 unless set_scales is given others, as SGLang and vLLM do without calibration.
"""

from __future__ import annotations

import torch

from minisgl.kernel.triton import use_triton
from minisgl.kvcache.base import BaseKVCache
from minisgl.quant import quantize_fp8

FP8_KV = torch.float8_e4m3fn


class MHAKVCache(BaseKVCache):
    """buffer[0 = keys | 1 = values, layer, slot, kv_head, head_dim], allocated once at start-up."""

    def __init__(self, num_kv_heads: int, head_dim: int, num_layers: int, num_pages: int, page_size: int = 1,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> None:
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"need at least one page of at least one slot (got {num_pages} x {page_size})")
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.num_layers = num_layers
        self.page_size = page_size
        self.dtype = dtype
        self.device = torch.device(device)
        self._kv_buffer = torch.zeros(2, num_layers, num_pages * page_size, num_kv_heads, head_dim,
                                      dtype=dtype, device=device)
        # Chapter 30: per-layer scales of an FP8 buffer (python floats: constants a CUDA graph may capture)
        self.k_scales = [1.0] * num_layers
        self.v_scales = [1.0] * num_layers

    @property
    def is_fp8(self) -> bool:
        return self.dtype == FP8_KV

    def set_scales(self, k_scales: list[float], v_scales: list[float]) -> None:
        """Chapter 30: one positive scale per layer for the keys and for the values (before anything is stored)."""
        for name, scales in (("k_scales", k_scales), ("v_scales", v_scales)):
            if len(scales) != self.num_layers or not all(s > 0 for s in scales):
                raise ValueError(f"{name} needs {self.num_layers} positive values, got {scales!r}")
        self.k_scales, self.v_scales = [float(s) for s in k_scales], [float(s) for s in v_scales]

    def dequantize(self, rows: torch.Tensor, layer_id: int, which: str, dtype: torch.dtype) -> torch.Tensor:
        """Rows read from k_cache/v_cache (which = "k" or "v") as `dtype`: an FP8 buffer's values times the layer's
        scale, any other buffer's values cast."""
        if not self.is_fp8:
            return rows.to(dtype)
        scale = (self.k_scales if which == "k" else self.v_scales)[layer_id]
        return rows.to(dtype) * scale

    @property
    def num_slots(self) -> int:
        return self._kv_buffer.shape[2]

    def k_cache(self, layer_id: int) -> torch.Tensor:
        return self._kv_buffer[0, layer_id]

    def v_cache(self, layer_id: int) -> torch.Tensor:
        return self._kv_buffer[1, layer_id]

    def store_kv(self, k: torch.Tensor, v: torch.Tensor, out_loc: torch.Tensor, layer_id: int) -> None:
        shape = (-1, self.num_kv_heads, self.head_dim)
        if self.is_fp8:
            # TODO(ch30): write k and v into this layer's slots as FP8: each divided by its own scale of this layer
            # (self.k_scales[layer_id], self.v_scales[layer_id]), clamped and cast by quantize_fp8.
            # >>> solution
            self.k_cache(layer_id)[out_loc] = quantize_fp8(k.reshape(shape), self.k_scales[layer_id])
            self.v_cache(layer_id)[out_loc] = quantize_fp8(v.reshape(shape), self.v_scales[layer_id])
            # <<< solution
            return
        if use_triton(k):  # chapter 19: keys and values in one Triton launch, cast on the way
            from minisgl.kernel.triton.store import store_kv

            store_kv(k, v, self.k_cache(layer_id), self.v_cache(layer_id), out_loc)
            return
        self.k_cache(layer_id)[out_loc] = k.reshape(shape).to(self.dtype)
        self.v_cache(layer_id)[out_loc] = v.reshape(shape).to(self.dtype)

    @property
    def bytes_per_slot(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self._kv_buffer.element_size()
