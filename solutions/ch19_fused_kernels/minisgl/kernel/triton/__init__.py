"""Triton kernels (chapter 17 on): paged attention (attention.py), and from chapter 19 the fused KV store
(store.py) and RMSNorm kernels (norm.py).

Importing the kernel modules needs triton. This package itself does not import it, so that the layers can
ask `use_triton` on every call and fall back to the torch ops on a machine without triton.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache

import torch

from minisgl import env


@lru_cache(maxsize=None)
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def use_triton(x: torch.Tensor) -> bool:
    """Whether the fused Triton kernels should handle `x`, by MINISGL_FUSED_KERNELS (read through env.ENV at
    every call, so a test can swap ENV): "off" never, "auto" for CUDA tensors when triton is installed, "on"
    for CUDA tensors and for CPU tensors under Triton's interpreter (TRITON_INTERPRET=1)."""
    mode = env.ENV.FUSED_KERNELS
    # TODO(ch19): "off" -> False. A CUDA tensor -> True when triton is available; when it is not, "on" is a
    # ValueError (naming MINISGL_FUSED_KERNELS) and "auto" is False. A CPU tensor: "auto" -> False; "on" -> True
    # only under TRITON_INTERPRET=1 with triton available, otherwise a ValueError that says what is missing.
    # >>> solution
    if mode == "off":
        return False
    if x.device.type == "cuda":
        if triton_available():
            return True
        if mode == "on":
            raise ValueError("MINISGL_FUSED_KERNELS=on, but triton is not installed")
        return False
    if mode == "auto":
        return False  # auto never picks the interpreter: it is for testing, not for speed
    if os.environ.get("TRITON_INTERPRET") == "1" and triton_available():
        return True
    raise ValueError(f"MINISGL_FUSED_KERNELS=on needs CUDA tensors (got one on {x.device}) or Triton's CPU "
                     "interpreter (TRITON_INTERPRET=1, set before triton is imported, with triton installed)")
    # <<< solution
