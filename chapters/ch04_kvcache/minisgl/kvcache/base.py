"""The interface of a KV cache: per-layer key/value storage addressed by slot index."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class BaseKVCache(ABC):
    """Slots are token positions in one big pool, shared by all requests.

    A request's tokens do not need contiguous slots: the page table (scheduler/table.py) records, for
    every request and position, which slot holds that token's key and value.
    """

    @abstractmethod
    def k_cache(self, layer_id: int) -> torch.Tensor:
        """[num_slots, num_kv_heads, head_dim] keys of one layer."""

    @abstractmethod
    def v_cache(self, layer_id: int) -> torch.Tensor:
        """[num_slots, num_kv_heads, head_dim] values of one layer."""

    @abstractmethod
    def store_kv(self, k: torch.Tensor, v: torch.Tensor, out_loc: torch.Tensor, layer_id: int) -> None:
        """Write the keys/values of new tokens ([n, num_kv_heads, head_dim]) into slots out_loc ([n])."""

    @property
    @abstractmethod
    def num_slots(self) -> int: ...
