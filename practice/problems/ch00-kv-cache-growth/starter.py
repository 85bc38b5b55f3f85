def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of keys and values that one token occupies across all layers."""
    raise NotImplementedError


def cat_growth(chunks: list[int]) -> dict:
    """Grow by concatenation: {"written": total tokens written, "peak": most tokens alive at once}."""
    raise NotImplementedError


def preallocated(chunks: list[int], capacity: int) -> dict:
    """Write into one buffer of `capacity` tokens: {"written": ..., "peak": capacity}; ValueError if it overflows."""
    raise NotImplementedError
