"""Where keys and values of past tokens live, and who owns which slot; from chapter 9 on, the prefix caches
that keep them for later requests (`create_prefix_cache` picks one)."""

from __future__ import annotations

import torch

from minisgl.kvcache.prefix_cache import BasePrefixCache, NoPrefixCache
from minisgl.kvcache.radix_cache import RadixCache


def create_prefix_cache(cache_type: str, page_size: int, device: torch.device | str) -> BasePrefixCache:
    """The prefix cache named by `cache_type`: "radix" shares prefixes, "naive" shares nothing."""
    if cache_type == "naive":
        return NoPrefixCache(device)
    if cache_type == "radix":
        return RadixCache(page_size, device)
    raise ValueError(f"cache_type must be 'naive' or 'radix', got {cache_type!r}")
