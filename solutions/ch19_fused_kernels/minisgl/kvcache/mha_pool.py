"""MHAKVCache: one preallocated buffer for the keys and values of every layer."""

from __future__ import annotations

import torch

from minisgl.kernel.triton import use_triton
from minisgl.kvcache.base import BaseKVCache


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

    @property
    def num_slots(self) -> int:
        return self._kv_buffer.shape[2]

    def k_cache(self, layer_id: int) -> torch.Tensor:
        return self._kv_buffer[0, layer_id]

    def v_cache(self, layer_id: int) -> torch.Tensor:
        return self._kv_buffer[1, layer_id]

    def store_kv(self, k: torch.Tensor, v: torch.Tensor, out_loc: torch.Tensor, layer_id: int) -> None:
        if use_triton(k):  # chapter 19: keys and values in one Triton launch, cast on the way
            from minisgl.kernel.triton.store import store_kv

            store_kv(k, v, self.k_cache(layer_id), self.v_cache(layer_id), out_loc)
            return
        shape = (-1, self.num_kv_heads, self.head_dim)
        self.k_cache(layer_id)[out_loc] = k.reshape(shape).to(self.dtype)
        self.v_cache(layer_id)[out_loc] = v.reshape(shape).to(self.dtype)

    @property
    def bytes_per_slot(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self._kv_buffer.element_size()
