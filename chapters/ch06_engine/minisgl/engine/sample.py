"""Turning logits into next tokens: greedy, or temperature with top-k / top-p filtering."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from minisgl.core import Req


@dataclass
class BatchSamplingArgs:
    """Per-request sampling settings as tensors; temperatures is None when the whole batch is greedy."""

    temperatures: torch.Tensor | None
    top_k: torch.Tensor | None = None
    top_p: torch.Tensor | None = None
    seeded: list[tuple[int, torch.Generator]] = field(default_factory=list)  # (row, its own generator)

    @classmethod
    def from_reqs(cls, reqs: list[Req], device: torch.device | str) -> BatchSamplingArgs:
        params = [r.sampling_params for r in reqs]
        if all(p.is_greedy for p in params):
            return cls(temperatures=None)

        def to_device(values: list) -> torch.Tensor:  # a blocking copy would wait for the GPU's queue
            return torch.tensor(values).to(device, non_blocking=True)

        return cls(
            temperatures=to_device([0.0 if p.is_greedy else p.temperature for p in params]),
            top_k=to_device([p.top_k for p in params]),
            top_p=to_device([p.top_p for p in params]),
            seeded=[(i, seeded_generator(r.sampling_params.seed, r.device_len, device))
                    for i, r in enumerate(reqs) if r.sampling_params.seed is not None and not r.sampling_params.is_greedy],
        )


def seeded_generator(seed: int, position: int, device: torch.device | str) -> torch.Generator:
    """A generator for one draw of a seeded request: its state depends on the seed and the token's position only,
    so the request samples the same tokens whatever else shares its batches (nothing to keep between steps)."""
    return torch.Generator(device=device).manual_seed(hash((seed, position)) & (2**63 - 1))


def top_k_top_p_filter(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Set to -inf every logit outside the row's top-k and outside its top-p nucleus (keeping the best one). Both
    filters read the same distribution, the softmax of the whole row, as SGLang's samplers do (Hugging Face
    renormalises what top-k kept before its top-p: the two differ where both filters bind)."""
    # TODO(ch06): sort each row descending; drop ranks >= k (k = -1 keeps all); drop tokens whose preceding
    # cumulative probability (of the softmax of the whole sorted row) already reaches top_p; always keep rank 0;
    # scatter the result back to vocabulary order.
    raise NotImplementedError("TODO(ch06): top_k_top_p_filter")


class Sampler:
    def __init__(self, device: torch.device | str, seed: int = 0) -> None:
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def sample(self, logits: torch.Tensor, args: BatchSamplingArgs) -> torch.Tensor:
        """logits [B, vocab] (the model's dtype) -> next token ids [B] (int32). The argmax needs no cast (16-bit
        to float32 is exact, so it picks the same token, and a 16-bit argmax reads half the bytes: chapter 22);
        what is sampled is computed in float32, so that no softmax runs in 16 bits."""
        # TODO(ch06): greedy rows take the argmax; the others (in float32) divide by their temperature, filter
        # with top_k_top_p_filter, and draw from the softmax with self.generator, except the rows of args.seeded,
        # which draw with their own generator.
        raise NotImplementedError("TODO(ch06): Sampler.sample")
