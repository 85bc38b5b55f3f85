"""Linear layers. The merged variants compute several projections with one matrix multiply."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.layers.base import BaseOP


class LinearReplicated(BaseOP):
    """y = x W^T (+ b). Weight shape [out_features, in_features], as in PyTorch and HF checkpoints."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        self.weight = torch.empty(out_features, in_features)
        self.bias = torch.empty(out_features) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class LinearQKVMerged(LinearReplicated):
    """q, k and v projections stacked into one weight: rows [q | k | v]."""

    def __init__(self, hidden_size: int, head_dim: int, num_qo_heads: int, num_kv_heads: int,
                 bias: bool = False) -> None:
        self.q_size = num_qo_heads * head_dim
        self.kv_size = num_kv_heads * head_dim
        super().__init__(hidden_size, self.q_size + 2 * self.kv_size, bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One matmul, then split the result into q, k and v."""
        # TODO(ch02): compute the merged projection once and split its last dimension as [q | k | v].
        raise NotImplementedError("TODO(ch02): LinearQKVMerged.forward")


class LinearColParallelMerged(LinearReplicated):
    """Several projections of the same input stacked row-wise (the MLP's [gate | up])."""

    def __init__(self, in_features: int, out_features_list: list[int], bias: bool = False) -> None:
        self.out_features_list = list(out_features_list)
        super().__init__(in_features, sum(out_features_list), bias)


class LinearOProj(LinearReplicated):
    """The attention output projection (row-parallel under tensor parallelism, chapter 16)."""


class LinearRowParallel(LinearReplicated):
    """The MLP down projection (row-parallel under tensor parallelism, chapter 16)."""
