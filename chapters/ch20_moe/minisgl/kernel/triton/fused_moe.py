"""The grouped GEMM of a mixture of experts in one Triton launch (the "fused MoE" kernel).

Input: entries (a token and one of its experts) laid out by expert in blocks of BLOCK_M rows (moe/fused.py,
moe_align_block_size). Each program computes one BLOCK_M x BLOCK_N tile of the output: BLOCK_M entries that
all use the same expert times a BLOCK_N slice of that expert's weight. One launch thus covers every expert,
whatever the number of entries each got; padding rows are masked out and cost only their share of a tile.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_moe_kernel(A, W, C, RouteWeights, SortedIds, ExpertIds, NumPadded, num_entries, N, K, rows_per_input,
                      stride_am, stride_we, stride_wn, stride_wk, stride_cm,
                      MUL_ROUTE_WEIGHT: tl.constexpr, IEEE: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # Program (pid_m, pid_n): rows pid_m * BLOCK_M + [0, BLOCK_M) of the sorted layout, output columns
    # pid_n * BLOCK_N + [0, BLOCK_N). C[entry] = A[entry // rows_per_input] @ W[expert].T (times the entry's
    # routing weight when MUL_ROUTE_WEIGHT), for every real entry of the tile.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    # TODO(ch20): return at once when the tile's first row is at or past NumPadded (the launch is sized for the
    # worst case). Load the tile's entries from SortedIds (a padding row holds num_entries: mask it out) and the
    # block's expert from ExpertIds (as int64: expert * stride_we can pass 2**31). Loop over K in BLOCK_K steps:
    # load the A rows (entry // rows_per_input) and the expert's W tile [BLOCK_K, BLOCK_N] (masked, 0 outside),
    # accumulate tl.dot in float32 (input_precision="ieee" when IEEE, so float32 stays float32 on a GPU).
    # Scale each row by RouteWeights[entry] if MUL_ROUTE_WEIGHT, then store the tile into C's entry rows, cast to
    # C's dtype.
    raise NotImplementedError("TODO(ch20): _fused_moe_kernel")


def pick_block_m(num_entries: int, num_experts: int) -> int:
    """Rows per tile: small when few entries per expert (decode: most of a big tile would be padding)."""
    per_expert = num_entries / num_experts
    return 16 if per_expert <= 16 else 32 if per_expert <= 64 else 64


def grouped_gemm(a: torch.Tensor, w: torch.Tensor, sorted_ids: torch.Tensor, expert_ids: torch.Tensor,
                 num_padded: torch.Tensor, rows_per_input: int, block_m: int,
                 route_weights: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                 block_n: int = 64, block_k: int = 32) -> torch.Tensor:
    """out[entry] = a[entry // rows_per_input] @ w[expert of entry].T (x route_weights[entry]), in one launch.

    a: [rows, K]; w: [experts, N, K]; the layout tensors from moe_align_block_size with the same block_m.
    Returns [num_entries, N] (num_entries = number of real entries = padding value in sorted_ids).
    """
    num_entries = a.shape[0] * rows_per_input
    _, n, k = w.shape
    if a.shape[1] != k:
        raise ValueError(f"a has {a.shape[1]} columns, the expert weights {k}")
    if block_m * (expert_ids.numel()) != sorted_ids.numel():
        raise ValueError(f"sorted_ids ({sorted_ids.numel()}) is not expert_ids ({expert_ids.numel()}) blocks of "
                         f"block_m {block_m}: align and multiply with the same block size")
    a = a if a.stride(1) == 1 else a.contiguous()
    out = torch.empty(num_entries, n, dtype=out_dtype or a.dtype, device=a.device)
    if num_entries == 0:
        return out
    grid = (expert_ids.numel(), triton.cdiv(n, block_n))
    _fused_moe_kernel[grid](
        a, w, out, route_weights if route_weights is not None else out, sorted_ids, expert_ids, num_padded,
        num_entries, n, k, rows_per_input, a.stride(0), w.stride(0), w.stride(1), w.stride(2), out.stride(0),
        MUL_ROUTE_WEIGHT=route_weights is not None, IEEE=a.dtype == torch.float32,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return out
