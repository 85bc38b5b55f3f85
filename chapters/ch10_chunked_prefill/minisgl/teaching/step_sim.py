"""The step simulator: a model-free, nano-vllm-style model of Sarathi's chunked steps, to see why chunks bound
decode stalls.

Every step runs one chunk of at most `chunk_size` prompt tokens (of the first waiting sequence) together
with one decode token for every running sequence. However long a newcomer's prompt is, a step never
carries more than chunk_size + (number of running sequences) tokens, so a running sequence waits at most
that long between two of its tokens. Without chunks a step may carry a whole prompt, and every running
sequence stalls behind it.

The engine's own scheduler (chapter 7) runs prefill and decode in separate batches, so there chunking
bounds the size of each prefill batch; decodes that ride along a chunk, as in this simulator, are chapter 21's
mixed batches.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class Sequence:
    seq_id: int
    prompt_len: int
    max_tokens: int
    prefill_offset: int = 0  # prompt tokens computed so far: the cursor of chunked prefill
    generated: int = 0

    @property
    def is_prefilling(self) -> bool:
        return self.prefill_offset < self.prompt_len

    @property
    def finished(self) -> bool:
        return self.generated >= self.max_tokens

    def next_chunk(self, chunk_size: int) -> tuple[int, int]:
        """The prompt positions [start, end) of the next chunk; moves the cursor past them."""
        # TODO(ch10): at most chunk_size tokens from prefill_offset, never past the prompt; advance the cursor.
        raise NotImplementedError("TODO(ch10): Sequence.next_chunk")


@dataclass
class Step:
    chunk: tuple[int, int, int] | None  # (seq_id, start, end) of the prompt chunk computed in this step
    decode: list[int] = field(default_factory=list)  # seq_ids that decode one token in this step

    @property
    def num_tokens(self) -> int:
        return (self.chunk[2] - self.chunk[1] if self.chunk else 0) + len(self.decode)


class StepSimulator:
    def __init__(self, chunk_size: int) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.chunk_size = chunk_size
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self) -> Step | None:
        """Plan and account one step: every running sequence decodes one token, and the first waiting sequence
        computes its next chunk. A sequence whose last chunk ran has its first token and runs from the next
        step on; a sequence with all its tokens leaves. None when there is nothing to do."""
        # TODO(ch10): decode list = the running sequences (each generates one token; drop the finished ones).
        # Then the first waiting sequence's next_chunk; if that was its last chunk, it generated its first
        # token: it leaves the queue and joins running unless already finished.
        raise NotImplementedError("TODO(ch10): StepSimulator.schedule")

    def run(self) -> list[Step]:
        steps = []
        while (step := self.schedule()) is not None:
            steps.append(step)
        return steps
