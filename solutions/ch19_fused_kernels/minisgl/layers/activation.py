"""Activation layers. From chapter 19, SiLU-and-mul is one Triton kernel when the fused kernels are on."""

from __future__ import annotations

import torch

from minisgl.kernel import torch_ops
from minisgl.kernel.triton import use_triton
from minisgl.layers.base import StateLessOP


class SiluAndMul(StateLessOP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if use_triton(x):
            from minisgl.kernel.triton.activation import silu_and_mul  # imports triton: only when wanted

            return silu_and_mul(x)
        return torch_ops.silu_and_mul(x)
