"""The KV of one request as a single tensor: gathered from its slots on one engine, scattered into other slots on
another. Shape [2, num_layers, n, num_kv_heads, head_dim]: keys then values, layer by layer, token by token."""

from __future__ import annotations

import torch

from minisgl.kvcache.base import BaseKVCache


def kv_shape(kv_cache: BaseKVCache, n: int) -> tuple[int, ...]:
    """The shape pack_kv gives the KV of n tokens."""
    k = kv_cache.k_cache(0)
    return (2, kv_cache.num_layers, n, *k.shape[1:])


def pack_kv(kv_cache: BaseKVCache, slots: torch.Tensor) -> torch.Tensor:
    """The keys and values stored in `slots` (the request's positions 0..n-1, in order), every layer, as one new
    contiguous tensor of kv_shape(kv_cache, n): what one send carries."""
    # TODO(ch29): for every layer l, gather k_cache(l)[slots] and v_cache(l)[slots]; stack them into
    # [2, num_layers, n, num_kv_heads, head_dim] (keys first), a tensor of its own (not a view of the pool).
    raise NotImplementedError("TODO(ch29): pack_kv")


def unpack_kv(kv_cache: BaseKVCache, slots: torch.Tensor, kv: torch.Tensor) -> None:
    """Write a packed KV (from pack_kv on the other engine) into `slots` of this engine's pool: position i's keys
    and values of every layer go to slots[i]. ValueError, and nothing written, if the shapes disagree."""
    want = kv_shape(kv_cache, len(slots))
    if tuple(kv.shape) != want:
        raise ValueError(f"packed KV has shape {tuple(kv.shape)}, this engine stores {want} for {len(slots)} tokens")
    # TODO(ch29): for every layer l, write kv[0, l] into k_cache(l) at `slots` and kv[1, l] into v_cache(l) (cast to
    # the pool's dtype and device).
    raise NotImplementedError("TODO(ch29): unpack_kv")
