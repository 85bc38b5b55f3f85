"""Linear layers. The merged variants compute several projections with one matrix multiply.

Under tensor parallelism (chapter 16) each rank holds a slice of every weight. Column-parallel layers (the
merged q/k/v and gate/up projections) hold some output rows: each rank computes its own heads or its own
slice of the MLP's hidden units, and nothing is exchanged. Row-parallel layers (o_proj, down_proj) hold the
matching input columns: each rank computes a partial sum, and one all-reduce adds the partial sums up.

From chapter 22, every multiply goes through the layer's PackedLinear: on a CPU the weight is packed once for
oneDNN (kernel/cpu_gemm.py), elsewhere it is F.linear as before.
"""

from __future__ import annotations

import torch

from minisgl.distributed import all_reduce, get_tp_info, split_heads
from minisgl.kernel.cpu_gemm import PackedLinear
from minisgl.layers.base import BaseOP


def divide(n: int, parts: int, what: str) -> int:
    if n % parts:
        raise ValueError(f"{what} ({n}) cannot be split evenly across tp_size {parts}")
    return n // parts


class LinearReplicated(BaseOP):
    """y = x W^T (+ b). Weight shape [out_features, in_features], as in PyTorch and HF checkpoints."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        self.weight = torch.empty(out_features, in_features)
        self.bias = torch.empty(out_features) if bias else None
        self._gemm = PackedLinear()  # private: no weight of its own in the state dict

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._gemm(x, self.weight, self.bias)


class LinearQKVMerged(LinearReplicated):
    """q, k and v projections stacked into one weight: rows [q | k | v], this rank's heads only."""

    def __init__(self, hidden_size: int, head_dim: int, num_qo_heads: int, num_kv_heads: int,
                 bias: bool = False) -> None:
        local_qo, local_kv = split_heads(num_qo_heads, num_kv_heads, get_tp_info().size)
        self.q_size = local_qo * head_dim
        self.kv_size = local_kv * head_dim
        super().__init__(hidden_size, self.q_size + 2 * self.kv_size, bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One matmul, then split the result into q, k and v."""
        qkv = super().forward(x)
        return qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)


class LinearColParallelMerged(LinearReplicated):
    """Several projections of the same input stacked row-wise (the MLP's [gate | up]), each cut by rank."""

    def __init__(self, in_features: int, out_features_list: list[int], bias: bool = False) -> None:
        tp = get_tp_info().size
        self.out_features_list = [divide(n, tp, "output features") for n in out_features_list]
        super().__init__(in_features, sum(self.out_features_list), bias)


class LinearRowParallel(LinearReplicated):
    """The MLP down projection: this rank's input columns, partial sums added up across ranks."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        if bias:  # every rank would add it: the sum would hold it tp_size times
            raise ValueError("a row-parallel layer with a bias is not supported")
        super().__init__(divide(in_features, get_tp_info().size, "input features"), out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: this rank's slice of the input features -> the full output, the same on every rank."""
        if get_tp_info().size == 1:
            return self._gemm(x, self.weight)
        return all_reduce(self._gemm(x, self.weight))


class LinearOProj(LinearRowParallel):
    """The attention output projection: row-parallel over this rank's heads."""
