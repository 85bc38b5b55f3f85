"""The benchmark workload: nano-vllm's bench.py, re-created from its description.

nano-vllm benchmarks 256 requests made with Python's `random` after `seed(0)`: for each request a prompt
length in [100, 1024] and then that many token ids in [0, 10000], and after all prompts, one output length
in [100, 1024] per request, generated with EOS ignored. The order of the calls matters: the same seed with
another order gives other numbers. Its README reports 133,966 output tokens (and 142,827 prompt tokens),
which is how the tests know this generator is the same one.
"""

from __future__ import annotations

import random

Workload = list[tuple[list[int], int]]  # (prompt token ids, output tokens to generate) per request


def nano_vllm_workload(num_seqs: int = 256, min_len: int = 100, max_input_len: int = 1024,
                       max_output_len: int = 1024, max_token_id: int = 10000, seed: int = 0) -> Workload:
    """[(prompt ids, output length)] for `num_seqs` requests; the defaults are nano-vllm's benchmark.

    Smaller arguments make the same kind of workload for a tiny model on a CPU (max_token_id below its
    vocabulary size). Uses its own random.Random, so the global random state is left alone.
    """
    if num_seqs < 1:
        raise ValueError(f"num_seqs must be >= 1, got {num_seqs}")
    if not 1 <= min_len <= min(max_input_len, max_output_len):
        raise ValueError(f"need 1 <= min_len <= max_input_len and max_output_len, got min_len={min_len}, "
                         f"max_input_len={max_input_len}, max_output_len={max_output_len}")
    if max_token_id < 0:
        raise ValueError(f"max_token_id must be >= 0, got {max_token_id}")
    # TODO(ch22): with rng = random.Random(seed), in nano-vllm's order: for each request a prompt length
    # rng.randint(min_len, max_input_len) and then that many ids rng.randint(0, max_token_id); after all the
    # prompts, one output length rng.randint(min_len, max_output_len) per request. Return [(ids, length)].
    raise NotImplementedError("TODO(ch22): nano_vllm_workload")


def quick_workload(max_token_id: int) -> Workload:
    """A few seconds' worth for a tiny model on a CPU: 8 requests, prompts of 4 to 32 tokens, 4 to 16 outputs."""
    return nano_vllm_workload(num_seqs=8, min_len=4, max_input_len=32, max_output_len=16, max_token_id=max_token_id)


def describe(workload: Workload) -> dict:
    """The numbers a result should carry about its workload."""
    if not workload:
        raise ValueError("the workload is empty")
    return {"requests": len(workload), "prompt_tokens": sum(len(p) for p, _ in workload),
            "output_tokens": sum(n for _, n in workload), "max_prompt_len": max(len(p) for p, _ in workload),
            "max_output_len": max(n for _, n in workload),
            "max_seq_len": max(len(p) + n for p, n in workload)}
