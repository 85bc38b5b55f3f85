def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes  # 2: keys and values


def _check(chunks: list[int]) -> None:
    for m in chunks:
        if not isinstance(m, int) or m < 1:
            raise ValueError(f"every chunk must be a positive integer, got {m!r}")


def cat_growth(chunks: list[int]) -> dict:
    _check(chunks)
    n = written = peak = 0
    for m in chunks:
        written += n + m  # the new tensor is written in full
        peak = max(peak, n + (n + m))  # the old tensor lives until the copy is done
        n += m
    return {"written": written, "peak": peak}


def preallocated(chunks: list[int], capacity: int) -> dict:
    _check(chunks)
    total = sum(chunks)
    if total > capacity:
        raise ValueError(f"{total} tokens do not fit in a buffer of {capacity}")
    return {"written": total, "peak": capacity}
