"""Attention backends: how a batch's queries meet the keys and values in the paged KV cache.

`create_attention_backend` picks one by name: "torch" (chapter 5, any device), "triton" (the course's
Triton kernels, CUDA), "fa" (flash-attn 2, CUDA, 16-bit, pages of a multiple of 256 slots), "hybrid"
(flash-attn for prefill, the Triton decode kernel for decode), or "auto": hybrid when flash-attn and triton
import and the page size and dtype allow it (fa without triton), else triton on CUDA, else torch.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from minisgl.attention.base import BaseAttnBackend
from minisgl.kvcache.base import BaseKVCache

BACKENDS = ("auto", "torch", "triton", "fa", "hybrid")


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def resolve_backend(name: str, device: torch.device, dtype: torch.dtype, page_size: int, head_dim: int = 64) -> str:
    """The backend `name` stands for on this device ("auto" decided), or ValueError if it cannot run here."""
    # TODO(ch17): reject unknown names. "auto": when flash_attn is importable, the device is CUDA, the dtype
    # 16-bit and page_size a multiple of 256 -> "hybrid" if the Triton kernels can run too (triton importable,
    # head_dim a power of two >= 16, what the kernels take), else "fa"; otherwise "triton" on CUDA if the
    # kernels can run; else "torch".
    # An explicit "fa" or "hybrid" off CUDA, or "triton" off CUDA without TRITON_INTERPRET=1 (Triton's CPU
    # interpreter), is ValueError(f"the {name!r} attention backend needs a CUDA device, not {device}"); an
    # unknown name is a ValueError naming it.
    raise NotImplementedError("TODO(ch17): resolve_backend")


def create_attention_backend(name: str, kv_cache: BaseKVCache, page_table: torch.Tensor, page_size: int,
                             dtype: torch.dtype) -> BaseAttnBackend:
    name = resolve_backend(name, page_table.device, dtype, page_size, kv_cache.head_dim)
    if name == "hybrid":
        from minisgl.attention.hybrid_backend import HybridAttnBackend

        return HybridAttnBackend(kv_cache, page_table, page_size)
    if name == "fa":
        from minisgl.attention.fa_backend import FlashAttnBackend

        return FlashAttnBackend(kv_cache, page_table, page_size)
    if name == "triton":
        from minisgl.attention.triton_backend import TritonAttnBackend

        return TritonAttnBackend(kv_cache, page_table)
    from minisgl.attention.torch_backend import TorchAttnBackend

    return TorchAttnBackend(kv_cache, page_table)
