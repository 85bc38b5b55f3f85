"""Routing: which experts each token goes to, and with what weight."""

from __future__ import annotations

import torch


def select_experts(router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, expert ids), both [tokens, top_k]: the top_k experts of each token, best first.

    router_logits: [tokens, num_experts]. Weights are float32 softmax probabilities whatever the logits' dtype;
    with `renormalize` (Qwen3's norm_topk_prob) a token's top_k weights are rescaled to sum to 1.
    """
    # TODO(ch20): softmax over the experts in float32, keep the top_k largest probabilities and their expert ids;
    # with renormalize, divide the kept probabilities by their sum.
    raise NotImplementedError("TODO(ch20): select_experts")
