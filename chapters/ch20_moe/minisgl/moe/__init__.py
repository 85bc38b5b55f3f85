"""Mixture of experts (chapter 20): routing, and the experts computed three ways.

    select_experts   softmax over the router's logits, top-k, optional renormalisation   (moe/topk.py)
    moe_reference    a loop over experts, each on the tokens routed to it               (moe/torch_moe.py)
    moe_grouped      entries sorted by expert once, one contiguous slice per expert      (moe/torch_moe.py)
    fused_moe        the same as two Triton grouped GEMMs, one launch per projection     (moe/fused.py)

run_experts picks one per call: the Triton kernel where chapter 19's use_triton says so (CUDA tensors with
triton installed, or MINISGL_FUSED_KERNELS=on under Triton's interpreter), the grouped torch version otherwise.
"""

from __future__ import annotations

import torch

from minisgl.kernel.triton import use_triton
from minisgl.moe.fused import moe_align_block_size
from minisgl.moe.topk import select_experts
from minisgl.moe.torch_moe import expert_mlp, moe_grouped, moe_reference


def run_experts(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights: torch.Tensor,
                ids: torch.Tensor) -> torch.Tensor:
    if use_triton(x):
        from minisgl.moe.fused import fused_moe  # imports triton

        return fused_moe(x, w_gate_up, w_down, weights, ids)
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        # moe_grouped copies the expert counts to the host, which a CUDA graph cannot hold.
        raise RuntimeError("the torch MoE path cannot be captured in a CUDA graph: use the fused kernel "
                           "(MINISGL_FUSED_KERNELS=auto or on) or turn CUDA graphs off (cuda_graph_max_bs=0)")
    return moe_grouped(x, w_gate_up, w_down, weights, ids)


__all__ = ["expert_mlp", "moe_align_block_size", "moe_grouped", "moe_reference", "run_experts", "select_experts"]
