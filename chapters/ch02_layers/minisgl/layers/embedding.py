"""Token embedding and the LM head (which may share the embedding's weight)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.layers.base import BaseOP


class VocabParallelEmbedding(BaseOP):
    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        self.num_embeddings = num_embeddings
        self.weight = torch.empty(num_embeddings, embedding_dim)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight)


class ParallelLMHead(BaseOP):
    """hidden states -> logits over the vocabulary. With tied embeddings it reads the embedding's weight."""

    def __init__(self, num_embeddings: int, embedding_dim: int, tie_to: VocabParallelEmbedding | None = None) -> None:
        self._tie_to = tie_to
        if tie_to is None:
            self.weight = torch.empty(num_embeddings, embedding_dim)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self._tie_to.weight if self._tie_to is not None else self.weight
        return F.linear(hidden, weight)
