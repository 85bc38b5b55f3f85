"""The batched LoRA delta: every row of a batch through its own adapter, in one pass.

The engine keeps each adapted projection's LoRA weights stacked by slot: A [slots, max_rank, in] and
B [slots, out, max_rank] (an adapter of a smaller rank is zero-padded, which adds nothing), and a scaling
(lora_alpha / r) per slot. A batch carries one slot index per token (-1: the base model, no adapter). A row's delta
is scaling[s] * B[s] (A[s] x): first "shrink" x to r numbers, then "expand" them to the output, as SGLang's and
Punica's SGMV/BGMV kernels name the two steps. On a GPU a Triton kernel does it (kernel/triton/lora.py); on the
CPU the same math is a gathered batched matmul in torch. On a GPU a merged layer's parts (q, k and v; gate and
up) share one launch of each kernel (StackedLoraTarget).
"""

from __future__ import annotations

import torch


def lora_delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: torch.Tensor,
               slots: torch.Tensor) -> torch.Tensor:
    """x [T, in], a [S, R, in], b [S, out, R], scaling [S] float32, slots [T] (-1: no adapter) -> [T, out]."""
    if x.is_cuda:
        from minisgl.kernel.triton.lora import lora_delta_triton

        return lora_delta_triton(x, a, b, scaling, slots)
    if x.shape[0] > GATHER_MAX_TOKENS:
        return lora_delta_grouped(x, a, b, scaling, slots)
    return lora_delta_torch(x, a, b, scaling, slots)


# Above this many tokens (a prefill) the CPU groups rows by adapter: the gathered form copies every token's A and B
# ([tokens, rank, in] and [tokens, out, rank] per projection), which for a 512-token prompt is tens of megabytes per
# layer, while a decode step's few rows gather little.
GATHER_MAX_TOKENS = 64


def lora_delta_grouped(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: torch.Tensor,
                       slots: torch.Tensor) -> torch.Tensor:
    """The same delta as lora_delta_torch, as two plain matmuls per adapter present (SGLang's and Punica's segment
    form). Finding the adapters present reads the slots on the host: cheap on a CPU, a sync on a GPU."""
    out = x.new_zeros(x.shape[0], b.shape[1])
    for s in slots.unique().tolist():
        if s < 0:
            continue
        rows = (slots == s).nonzero().squeeze(1)
        out[rows] = (x[rows] @ a[s].T) @ b[s].T * scaling[s].to(x.dtype)
    return out


def lora_delta_torch(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: torch.Tensor,
                     slots: torch.Tensor) -> torch.Tensor:
    """Row t's delta: scaling[s] * b[s] @ (a[s] @ x[t]) with s = slots[t]; exactly zero where s is -1."""
    # TODO(ch31): gather each row's A and B by its slot (a slot of -1 must not index the last adapter: clamp it,
    # then zero those rows), shrink (A x: r numbers per row), expand (B times them: the output), times the slot's
    # scaling (alpha / r, already per slot). torch.bmm over the gathered [T, R, in] and [T, out, R] does both.
    raise NotImplementedError("TODO(ch31): lora_delta_torch")


class LoraTarget:
    """The LoRA weights of one linear layer. A merged layer (q/k/v, gate/up) holds one A and one B per
    sub-projection, as PEFT saves them: every B writes its own slice [start, end) of the merged output."""

    def __init__(self, parts: list[tuple[str, int, int]], a: list[torch.Tensor], b: list[torch.Tensor],
                 scaling: torch.Tensor) -> None:
        self.parts = parts  # (module name, start, end) of each adapted sub-projection
        self.a, self.b, self.scaling = a, b, scaling

    def add_to(self, y: torch.Tensor, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """y [T, out] of the base multiply (changed in place and returned) plus every part's delta in its slice."""
        # TODO(ch31): for every part, add lora_delta(x, its A, its B, self.scaling, slots) into y's columns
        # [start, end) of that part (q, k and v of a merged layer each have their own range).
        raise NotImplementedError("TODO(ch31): LoraTarget.add_to")


class StackedLoraTarget(LoraTarget):
    """A LoraTarget on a GPU whose parts' A and B are views of two stacked tensors of the whole layer: A
    [slots, parts x R, in] (part p's rank rows at [p R, (p+1) R)) and B [slots, out, R] (each part's rows at its
    output columns). One shrink and one expand launch then serve every part, the expand adding into y in place:
    two launches per layer instead of three per part, which is most of LoRA's cost in a small decode step."""

    def __init__(self, parts: list[tuple[str, int, int]], a_all: torch.Tensor, b_all: torch.Tensor,
                 scaling: torch.Tensor) -> None:
        rank = b_all.shape[2]
        super().__init__(parts, [a_all[:, i * rank:(i + 1) * rank] for i in range(len(parts))],
                         [b_all[:, start:end] for _, start, end in parts], scaling)
        self.a_all, self.b_all = a_all, b_all
        self.col_part = torch.full((b_all.shape[1],), -1, dtype=torch.int32, device=b_all.device)
        for i, (_, start, end) in enumerate(parts):
            self.col_part[start:end] = i

    def add_to(self, y: torch.Tensor, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        from minisgl.kernel.triton.lora import lora_add_triton

        return lora_add_triton(y, x, self.a_all, self.b_all, self.col_part, self.scaling, slots)
