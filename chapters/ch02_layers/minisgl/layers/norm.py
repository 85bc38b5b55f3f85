"""RMSNorm, plain and with the residual add fused in."""

from __future__ import annotations

import torch

from minisgl.kernel.torch_ops import fused_add_rms_norm, rms_norm
from minisgl.layers.base import BaseOP


class RMSNorm(BaseOP):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        self.weight = torch.ones(size)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class RMSNormFused(RMSNorm):
    """forward(x, residual) -> (norm(x + residual), x + residual); with no residual yet, (norm(x), x).

    Every decoder layer adds its input to its output; carrying the running sum as `residual` lets the
    add and the next norm happen in one step (one kernel on GPU, chapter 19).
    """

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            return rms_norm(x, self.weight, self.eps), x
        return fused_add_rms_norm(x, residual, self.weight, self.eps)
