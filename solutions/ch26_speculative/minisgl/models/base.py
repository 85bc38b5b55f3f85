"""BaseLLMModel: what the engine expects of every model."""

from __future__ import annotations

import torch

from minisgl.core import Batch
from minisgl.layers.base import BaseOP


def last_token_indices(batch: Batch) -> torch.Tensor | slice:
    """Index, in the flattened batch, of each request's last new token (the one whose logits we sample); in a
    verify batch (chapter 26) every new token, since each draft is checked against the logits before it."""
    if batch.is_decode or batch.is_verify:
        # Decode: one new token per request, so every row is a last token. No index tensor is copied to the device,
        # which keeps the decode forward pass free of host-to-device copies (a CUDA graph can hold none).
        return slice(None)
    ends = torch.cumsum(torch.tensor([r.extend_len for r in batch.reqs]), dim=0)
    return (ends - 1).to(batch.input_ids.device, non_blocking=True)  # blocking, it would wait for the GPU


class BaseLLMModel(BaseOP):
    """forward() reads the current batch from the global context and returns one row of logits per request."""

    def forward(self) -> torch.Tensor:
        raise NotImplementedError
