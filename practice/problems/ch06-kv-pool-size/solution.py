def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


def num_kv_pages(budget_bytes: int, bytes_per_token: int, page_size: int, max_running_reqs: int,
                 max_seq_len: int) -> int:
    page_bytes = bytes_per_token * page_size
    useful = -(-max_running_reqs * max_seq_len // page_size)
    pages = min(budget_bytes // page_bytes, useful)
    if pages < 1:
        raise ValueError(f"no room for the KV cache: one page needs {page_bytes} bytes, {budget_bytes} available")
    return pages
