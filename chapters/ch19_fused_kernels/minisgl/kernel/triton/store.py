"""The KV store as one Triton kernel: the keys and values of the new tokens scattered into their cache slots.

The torch version (chapter 4) is two indexed assignments, each a cast (a temporary copy when the dtypes
differ) and a scatter: up to four kernel launches per layer, with the temporaries written and read back.
Here one launch reads each new number once, casts it in registers and writes it once, keys and values alike.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _store_kv_kernel(K, V, KCache, VCache, OutLoc, width, stride_k, stride_v, stride_kc, stride_vc,
                     BLOCK: tl.constexpr):
    # One program per (new token, block of BLOCK numbers of its kv_heads * head_dim row); keys and values of the
    # token are both handled by the same program.
    token = tl.program_id(0)
    block = tl.program_id(1)
    # TODO(ch19): load the token's slot from OutLoc (as int64: slot * row stride overflows 32 bits in a large
    # cache), take the columns block * BLOCK + [0, BLOCK) (masked to width), load them from the token's row of K
    # and of V, cast to the cache's dtype (KCache.dtype.element_ty) and store them into row `slot` of KCache and
    # VCache.
    raise NotImplementedError("TODO(ch19): _store_kv_kernel")


def _rows(x: torch.Tensor, n: int, width: int, what: str) -> torch.Tensor:
    """x as [n, width] with unit stride along a row: a view when possible (a slice of the fused QKV output is
    one), a copy only when the numbers of a row are not contiguous."""
    if x.numel() != n * width:
        raise ValueError(f"{what} has shape {tuple(x.shape)}: expected {n} rows of {width} numbers")
    x = x.reshape(n, width)
    return x if x.stride(1) == 1 else x.contiguous()


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             out_loc: torch.Tensor, max_block: int = 1024) -> None:
    """k_cache[out_loc[i]] = k[i] and v_cache[out_loc[i]] = v[i], cast to the cache dtype, in one launch.

    k, v: [n, kv_heads * head_dim] or [n, kv_heads, head_dim], any float dtype; caches [slots, kv_heads, head_dim]
    with contiguous rows; out_loc [n] int32 or int64 slot indexes.
    """
    n = out_loc.shape[0]
    width = k_cache[0].numel()
    if not (k_cache[0].is_contiguous() and v_cache[0].is_contiguous()):
        raise ValueError("store_kv needs every cache row (one slot: kv_heads x head_dim) to be contiguous")
    if n == 0:
        return
    k, v = _rows(k, n, width, "k"), _rows(v, n, width, "v")
    block = min(triton.next_power_of_2(width), max_block)
    grid = (n, triton.cdiv(width, block))
    _store_kv_kernel[grid](k, v, k_cache, v_cache, out_loc, width, k.stride(0), v.stride(0),
                           k_cache.stride(0), v_cache.stride(0), BLOCK=block)
