"""RMSNorm, plain and with the residual add fused in."""

from __future__ import annotations

from types import ModuleType

import torch

from minisgl.kernel import torch_ops
from minisgl.kernel.triton import use_triton
from minisgl.layers.base import BaseOP


def _ops(x: torch.Tensor) -> ModuleType:
    """The module whose rms_norm / fused_add_rms_norm handle x: chapter 19's Triton kernels or the torch ops
    (both have the same functions, signatures and results)."""
    if use_triton(x):
        from minisgl.kernel.triton import norm  # imports triton, so only when the kernels are wanted

        return norm
    return torch_ops


class RMSNorm(BaseOP):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        self.weight = torch.ones(size)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ops(x).rms_norm(x, self.weight, self.eps)


class RMSNormFused(RMSNorm):
    """forward(x, residual) -> (norm(x + residual), x + residual); with no residual yet, (norm(x), x).

    Every decoder layer adds its input to its output; carrying the running sum as `residual` lets the
    add and the next norm happen in one step: one Triton kernel when the fused kernels are on (chapter 19).
    """

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        ops = _ops(x)
        if residual is None:
            return ops.rms_norm(x, self.weight, self.eps), x
        return ops.fused_add_rms_norm(x, residual, self.weight, self.eps)
