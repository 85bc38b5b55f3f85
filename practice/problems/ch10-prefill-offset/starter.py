from dataclasses import dataclass


@dataclass
class Sequence:
    """One request of the stepper (you may use it or not)."""
    seq_id: int
    prompt_len: int
    max_tokens: int
    prefill_offset: int = 0   # prompt tokens computed so far
    num_output: int = 0       # output tokens produced so far


def run_steps(prompt_lens: list[int], max_tokens: list[int], chunk_size: int | None):
    """Return (steps, longest_stall); each step is (chunk or None, sorted decode ids)."""
    raise NotImplementedError
