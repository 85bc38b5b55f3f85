from dataclasses import dataclass


@dataclass
class Sequence:
    seq_id: int
    prompt_len: int
    max_tokens: int
    prefill_offset: int = 0
    num_output: int = 0


def run_steps(prompt_lens: list[int], max_tokens: list[int], chunk_size: int | None):
    if any(n < 1 for n in prompt_lens) or any(m < 1 for m in max_tokens):
        raise ValueError("prompt lengths and max_tokens must be at least 1")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError("chunk_size must be at least 1 (or None)")
    waiting = [Sequence(i, p, m) for i, (p, m) in enumerate(zip(prompt_lens, max_tokens))]
    running: list[Sequence] = []
    steps, stall = [], 0
    while waiting or running:
        decodes = [s.seq_id for s in running]
        for s in running:
            s.num_output += 1
        running = [s for s in running if s.num_output < s.max_tokens]
        chunk = None
        if waiting:
            s = waiting[0]
            size = s.prompt_len - s.prefill_offset if chunk_size is None else chunk_size
            end = min(s.prefill_offset + size, s.prompt_len)
            chunk = (s.seq_id, s.prefill_offset, end)
            s.prefill_offset = end
            if end == s.prompt_len:
                waiting.pop(0)
                s.num_output = 1                  # the completing chunk samples the first token
                if s.num_output < s.max_tokens:
                    running.append(s)             # decodes from the next step on
        cost = (chunk[2] - chunk[1] if chunk else 0) + len(decodes)
        if decodes:
            stall = max(stall, cost)
        steps.append((chunk, decodes))
    return steps, stall
