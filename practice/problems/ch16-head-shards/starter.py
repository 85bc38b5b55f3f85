def head_shards(num_q: int, num_kv: int, tp: int) -> list[tuple[list[int], list[int]]]:
    """For each rank: (its query heads, its KV heads)."""
    raise NotImplementedError
