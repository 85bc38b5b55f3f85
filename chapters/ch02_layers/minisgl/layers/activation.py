"""Activation layers."""

from __future__ import annotations

import torch

from minisgl.kernel.torch_ops import silu_and_mul
from minisgl.layers.base import StateLessOP


class SiluAndMul(StateLessOP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)
