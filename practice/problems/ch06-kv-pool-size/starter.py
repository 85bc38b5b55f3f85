def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of keys and values one token takes across all layers."""
    raise NotImplementedError


def num_kv_pages(budget_bytes: int, bytes_per_token: int, page_size: int, max_running_reqs: int,
                 max_seq_len: int) -> int:
    """Whole pages the budget allows, capped by ceil(max_running_reqs * max_seq_len / page_size).
    ValueError if not even one page fits."""
    raise NotImplementedError
