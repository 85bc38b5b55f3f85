"""Token embedding and the LM head (which may share the embedding's weight), both split by vocabulary.

With tp_size ranks each holds ceil(vocab / tp_size) consecutive rows (the last rank's tail is padding). From
chapter 22 the LM head multiplies through a PackedLinear (kernel/cpu_gemm.py: the weight packed once on a CPU).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.distributed import all_gather_last_dim, all_reduce, get_tp_info
from minisgl.kernel.cpu_gemm import PackedLinear
from minisgl.layers.base import BaseOP


def vocab_shard(num_embeddings: int) -> tuple[int, int]:
    """(first row, row count) of this rank's slice of the vocabulary."""
    info = get_tp_info()
    rows = -(-num_embeddings // info.size)
    return info.rank * rows, rows


class VocabParallelEmbedding(BaseOP):
    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        self.num_embeddings = num_embeddings
        self._start, rows = vocab_shard(num_embeddings)
        self.weight = torch.empty(rows, embedding_dim)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Each rank looks up the ids in its slice and contributes zeros for the others; the sum is the lookup."""
        if get_tp_info().size == 1:
            return F.embedding(input_ids, self.weight)
        local = input_ids - self._start
        mine = (local >= 0) & (local < self.weight.shape[0])
        out = F.embedding(torch.where(mine, local, 0), self.weight)
        return all_reduce(out * mine.unsqueeze(-1).to(out.dtype))


class ParallelLMHead(BaseOP):
    """hidden states -> logits over the vocabulary. With tied embeddings it reads the embedding's weight."""

    def __init__(self, num_embeddings: int, embedding_dim: int, tie_to: VocabParallelEmbedding | None = None) -> None:
        self.num_embeddings = num_embeddings
        self._tie_to = tie_to
        self._gemm = PackedLinear()  # a tied weight is packed here too; the embedding keeps reading it plain
        if tie_to is None:
            self.weight = torch.empty(vocab_shard(num_embeddings)[1], embedding_dim)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Every rank gets the logits of the whole vocabulary, so every rank samples the same token."""
        weight = self._tie_to.weight if self._tie_to is not None else self.weight
        if get_tp_info().size == 1:
            return self._gemm(hidden, weight)
        logits = all_gather_last_dim(self._gemm(hidden, weight))
        return logits[..., : self.num_embeddings]
