"""The experts as two grouped GEMMs (Triton): entries sorted by expert, each expert's run padded to whole blocks.

Every tile of the kernel (kernel/triton/fused_moe.py) multiplies BLOCK_M rows by one expert's weight, so the
rows of a block must all belong to the same expert. moe_align_block_size lays the entries out that way.
"""

from __future__ import annotations

import torch

from minisgl.kernel.torch_ops import silu_and_mul


def moe_align_block_size(ids: torch.Tensor, num_experts: int,
                         block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lay the entries of ids (entry i = token i // top_k's (i % top_k)-th expert) out by expert, in blocks.

    Returns
      sorted_ids   [max_padded] int32: entry numbers, expert 0's first, each expert's run padded with the value
                   ids.numel() (no entry) up to a multiple of `block`; unused space after the last run too.
      expert_ids   [max_padded / block] int32: the expert of every block (-1 past the last run).
      num_padded   [1] int32: where the last run ends (the blocks at and after it hold nothing).
    max_padded = ids.numel() + num_experts * (block - 1), the most the padding can take, rounded up to whole
    blocks: every shape is known before looking at the ids, so nothing waits for the device (a CUDA graph can
    hold it).
    """
    # TODO(ch20): count each expert's entries (scatter_add_ of ones: torch.bincount would wait for the device),
    # round each count up to a multiple of block, and take cumulative sums to get each expert's padded start.
    # A stable argsort of the flattened ids gives the entries in expert order; an entry's place is its expert's
    # padded start plus its rank among that expert's entries. Fill sorted_ids with ids.numel() and scatter the
    # entries in. A block's expert is the expert whose padded run contains the block's first row
    # (torch.searchsorted on the padded ends); blocks at or after the end get -1.
    raise NotImplementedError("TODO(ch20): moe_align_block_size")


def fused_moe(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights: torch.Tensor,
              ids: torch.Tensor, block_m: int | None = None) -> torch.Tensor:
    """The experts in two Triton launches (shapes as in moe/torch_moe.py): gate/up for every entry, silu * up,
    then down scaled by each entry's routing weight; the top_k rows of a token are summed at the end."""
    from minisgl.kernel.triton.fused_moe import grouped_gemm, pick_block_m

    tokens, top_k = ids.shape
    block_m = block_m or pick_block_m(tokens * top_k, w_gate_up.shape[0])
    sorted_ids, expert_ids, num_padded = moe_align_block_size(ids, w_gate_up.shape[0], block_m)
    # Each entry reads its token's row of x; its output row is the entry's own.
    gate_up = grouped_gemm(x, w_gate_up, sorted_ids, expert_ids, num_padded, rows_per_input=top_k, block_m=block_m)
    down = grouped_gemm(silu_and_mul(gate_up), w_down, sorted_ids, expert_ids, num_padded, rows_per_input=1,
                        block_m=block_m, route_weights=weights.flatten(), out_dtype=torch.float32)
    return down.view(tokens, top_k, -1).sum(dim=1).to(x.dtype)
