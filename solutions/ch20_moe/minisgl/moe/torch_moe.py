"""The experts in plain PyTorch, two ways: a loop over experts (the reference) and a sorted, grouped version.

Shapes, shared by every implementation of this package:
    x           [tokens, hidden]
    w_gate_up   [experts, 2 * inter, hidden]   every expert's [gate | up] weight (this rank's slice of inter)
    w_down      [experts, hidden, inter]
    weights     [tokens, top_k] float32        routing weights (select_experts)
    ids         [tokens, top_k] int            expert ids
The result is [tokens, hidden] in x's dtype: sum over k of weights[t, k] * expert_{ids[t, k]}(x[t]), summed in
float32 at least (float64 inputs stay float64: the tests' reference).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.kernel.torch_ops import silu_and_mul


def accumulator_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for float32 and narrower inputs, float64 for float64."""
    return torch.promote_types(x.dtype, torch.float32)


def expert_mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """One expert's gated MLP on some rows: down(silu(gate(x)) * up(x))."""
    return F.linear(silu_and_mul(F.linear(x, w_gate_up)), w_down)


def moe_reference(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights: torch.Tensor,
                  ids: torch.Tensor) -> torch.Tensor:
    """For every expert: find its tokens, run it on them, add the weighted result into their rows."""
    # TODO(ch20): accumulate into a [tokens, hidden] zero tensor of accumulator_dtype(x). For each expert e, find
    # the (token, slot) pairs with ids[token, slot] == e (skip an expert nobody picked), run expert_mlp on those
    # tokens' rows, scale each result row by weights[token, slot] and add it into row `token` (index_add_).
    # Return it in x's dtype.
    # >>> solution
    out = torch.zeros(x.shape, dtype=accumulator_dtype(x), device=x.device)
    for e in range(w_gate_up.shape[0]):
        token, slot = torch.where(ids == e)
        if token.numel() == 0:
            continue
        y = expert_mlp(x[token], w_gate_up[e], w_down[e])
        out.index_add_(0, token, y.to(out.dtype) * weights[token, slot, None])
    return out.to(x.dtype)
    # <<< solution


def moe_grouped(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights: torch.Tensor,
                ids: torch.Tensor) -> torch.Tensor:
    """Sort the tokens x top_k (token, expert) pairs by expert once, then run each expert on one contiguous slice.

    One sort and one copy of the counts to the host, instead of one search through all ids per expert.
    """
    # TODO(ch20): flatten ids to [tokens * top_k] (entry i is token i // top_k), order the entries by expert with a
    # stable argsort, gather the input rows in that order, and count each expert's entries (torch.bincount with
    # minlength; .tolist() once). Run every expert with entries on its contiguous run of rows, scale each row by its
    # entry's weight, and add the rows back into their tokens in a [tokens, hidden] tensor of accumulator_dtype(x).
    # Return it in x's dtype.
    # >>> solution
    top_k = ids.shape[1]
    flat = ids.flatten()
    order = flat.argsort(stable=True)
    token = order // top_k
    counts = torch.bincount(flat, minlength=w_gate_up.shape[0]).tolist()
    rows = x[token]
    results = torch.empty(rows.shape, dtype=accumulator_dtype(x), device=x.device)
    start = 0
    for e, count in enumerate(counts):
        if count:
            results[start:start + count] = expert_mlp(rows[start:start + count], w_gate_up[e], w_down[e])
            start += count
    results *= weights.flatten()[order, None]
    out = torch.zeros(x.shape, dtype=results.dtype, device=x.device)
    return out.index_add_(0, token, results).to(x.dtype)
    # <<< solution
