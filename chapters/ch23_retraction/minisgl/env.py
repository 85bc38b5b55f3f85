"""Settings read once from the environment (MINISGL_*), so a run can be tuned without code changes."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name}={value!r} is not a boolean (use 1/0, true/false)")


def _int(name: str, default: int) -> int:
    value = os.environ.get(name)
    try:
        return default if value is None else int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.strip().lower() not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value.strip().lower()


def _float(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        return default if value is None else float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number") from None


@dataclass(frozen=True)
class EnvVars:
    # Threads torch may use on CPU (0 = torch's default).
    CPU_THREADS: int = _int("MINISGL_CPU_THREADS", 0)
    # Quiet mode for progress bars and logs (tests set it).
    QUIET: bool = _bool("MINISGL_QUIET", False)
    # Run each batch to the end before scheduling the next (chapter 11's overlap scheduling off).
    DISABLE_OVERLAP_SCHEDULING: bool = _bool("MINISGL_DISABLE_OVERLAP_SCHEDULING", False)
    # Let running requests decode in the same forward pass as a prefill batch (chapter 21's mixed batches).
    ENABLE_MIXED_CHUNK: bool = _bool("MINISGL_ENABLE_MIXED_CHUNK", False)
    # Chapter 23's admission: "conservative" reserves for every request all it may still write (max_tokens);
    # "optimistic" counts running requests at an estimate (a new-token ratio) and retracts when the pool runs dry.
    ADMISSION: str = _choice("MINISGL_ADMISSION", "conservative", ("conservative", "optimistic"))
    # Where the ratio of optimistic admission starts (SGLang's SGLANG_INIT_NEW_TOKEN_RATIO).
    INIT_NEW_TOKEN_RATIO: float = _float("MINISGL_INIT_NEW_TOKEN_RATIO", 0.7)
    # Chapter 19's fused Triton kernels (KV store, RMSNorm, residual add + RMSNorm): "auto" uses them for CUDA
    # tensors when triton imports, "on" also on a CPU under TRITON_INTERPRET=1, "off" keeps the torch ops.
    FUSED_KERNELS: str = _choice("MINISGL_FUSED_KERNELS", "auto", ("auto", "on", "off"))


ENV = EnvVars()
