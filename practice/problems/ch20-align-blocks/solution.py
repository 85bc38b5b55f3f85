def align_blocks(ids: list[list[int]], num_experts: int, block: int) -> tuple[list[int], list[int]]:
    """(entries laid out by expert, each run padded to whole blocks; the expert of every block)."""
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    flat = [e for row in ids for e in row]
    counts = [0] * num_experts
    for e in flat:
        if not 0 <= e < num_experts:
            raise ValueError(f"expert {e} is outside [0, {num_experts})")
        counts[e] += 1
    padded = [-(-c // block) * block for c in counts]
    starts = [sum(padded[:e]) for e in range(num_experts)]
    layout = [len(flat)] * sum(padded)
    nxt = list(starts)
    for i, e in enumerate(flat):
        layout[nxt[e]] = i
        nxt[e] += 1
    block_experts = [e for e in range(num_experts) for _ in range(padded[e] // block)]
    return layout, block_experts
