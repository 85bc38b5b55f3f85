"""MoELayer: the experts of one mixture-of-experts block, their weights stacked into two tensors.

Under tensor parallelism (chapter 16) every rank holds every expert, but only its slice of each expert's
intermediate dimension: the rows of gate and up, the matching columns of down, as a dense MLP is split. Each
rank then computes a partial sum of every token's output, and one all-reduce adds them up. The routing is
computed whole on every rank (the router is small and replicated), so all ranks pick the same experts.
"""

from __future__ import annotations

import torch

from minisgl.distributed import all_reduce, get_tp_info
from minisgl.layers.base import BaseOP
from minisgl.layers.linear import divide
from minisgl.moe import run_experts, select_experts


class MoELayer(BaseOP):
    """gate_up_proj [experts, 2 * inter, hidden] (rows [gate | up] of this rank's slice) and down_proj
    [experts, hidden, inter]; forward(x, router_logits) -> [tokens, hidden], the same on every rank."""

    def __init__(self, num_experts: int, top_k: int, hidden_size: int, intermediate_size: int,
                 renormalize: bool) -> None:
        if not 0 < top_k <= num_experts:
            raise ValueError(f"top_k {top_k} must be between 1 and the number of experts ({num_experts})")
        self.num_experts, self.top_k, self.renormalize = num_experts, top_k, renormalize
        local = divide(intermediate_size, get_tp_info().size, "moe_intermediate_size")
        self.gate_up_proj = torch.empty(num_experts, 2 * local, hidden_size)
        self.down_proj = torch.empty(num_experts, hidden_size, local)

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        # TODO(ch20): route every token (select_experts with this layer's top_k and renormalize), run the experts
        # on this rank's weights (run_experts), and add the ranks' partial sums up (all_reduce).
        raise NotImplementedError("TODO(ch20): MoELayer.forward")
