def head_shards(num_q: int, num_kv: int, tp: int) -> list[tuple[list[int], list[int]]]:
    """For each rank: (its query heads, its KV heads)."""
    if tp < 1 or num_kv < 1 or num_q % num_kv or num_q % tp:
        raise ValueError(f"{num_q} query heads, {num_kv} KV heads do not split over {tp} ranks")
    if (num_kv >= tp and num_kv % tp) or (num_kv < tp and tp % num_kv):
        raise ValueError(f"{num_kv} KV heads neither split over nor replicate across {tp} ranks")
    q_per_rank = num_q // tp
    out = []
    for r in range(tp):
        q = list(range(r * q_per_rank, (r + 1) * q_per_rank))
        if num_kv >= tp:
            per = num_kv // tp
            kv = list(range(r * per, (r + 1) * per))
        else:
            kv = [r // (tp // num_kv)]
        out.append((q, kv))
    return out
