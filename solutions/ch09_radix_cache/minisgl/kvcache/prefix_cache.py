"""The prefix-cache interface: remember the KV of token sequences after their requests, so that a later
request starting with the same tokens skips computing them.

A handle names a cached prefix. While a request uses one it holds a lock on it, so that eviction never
takes KV a running request still reads. Two implementations: RadixCache (radix_cache.py) shares prefixes,
NoPrefixCache (here, cache type "naive") shares nothing; `minisgl.kvcache.create_prefix_cache` picks one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class CacheHandle:
    """A cached prefix of `cached_len` tokens; `node` is where it ends in the cache's own structure."""

    cached_len: int
    node: Any = None


class BasePrefixCache(ABC):
    @abstractmethod
    def match_prefix(self, ids: list[int]) -> tuple[CacheHandle, torch.Tensor]:
        """The longest cached prefix of `ids` (whole pages): its handle and the KV slots of its tokens."""

    @abstractmethod
    def slots(self, handle: CacheHandle) -> torch.Tensor:
        """The KV slots of the prefix a handle names, in token order."""

    @abstractmethod
    def insert_prefix(self, ids: list[int], slots: torch.Tensor) -> tuple[int, CacheHandle]:
        """Take ownership of the KV slots of `ids` (whole pages). Returns how many leading tokens were cached
        already (the caller still owns those slots of its own and frees them) and a handle to all of `ids`."""

    @abstractmethod
    def lock_handle(self, handle: CacheHandle, unlock: bool = False) -> None:
        """Protect the prefix from eviction while a request uses it (locks nest: one unlock per lock)."""

    @abstractmethod
    def evict(self, num_slots: int) -> torch.Tensor:
        """Drop unlocked prefixes, least recently used first, until at least num_slots are freed; their slots."""

    @property
    @abstractmethod
    def evictable_size(self) -> int:
        """Slots held only by the cache (unlocked): free for the taking."""

    @property
    @abstractmethod
    def protected_size(self) -> int:
        """Slots of locked prefixes: in use by running requests."""

    @abstractmethod
    def cached_slots(self) -> torch.Tensor:
        """Every slot the cache holds (for integrity checks)."""

    @abstractmethod
    def check_integrity(self) -> None: ...


class NoPrefixCache(BasePrefixCache):
    """cache_type="naive": nothing is ever shared; inserting takes nothing, so the request keeps (and frees) it all."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)

    def _empty(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.int32, device=self.device)

    def match_prefix(self, ids: list[int]) -> tuple[CacheHandle, torch.Tensor]:
        return CacheHandle(0), self._empty()

    def slots(self, handle: CacheHandle) -> torch.Tensor:
        return self._empty()

    def insert_prefix(self, ids: list[int], slots: torch.Tensor) -> tuple[int, CacheHandle]:
        return 0, CacheHandle(0)

    def lock_handle(self, handle: CacheHandle, unlock: bool = False) -> None:
        pass

    def evict(self, num_slots: int) -> torch.Tensor:
        if num_slots > 0:
            raise MemoryError(f"cannot evict {num_slots} slots: the naive cache holds nothing")
        return self._empty()

    @property
    def evictable_size(self) -> int:
        return 0

    @property
    def protected_size(self) -> int:
        return 0

    def cached_slots(self) -> torch.Tensor:
        return self._empty()

    def check_integrity(self) -> None:
        pass
