def _check(page_size: int, *lengths: int) -> None:
    if page_size < 1:
        raise ValueError(f"page_size must be at least 1, got {page_size}")
    if any(n < 0 for n in lengths):
        raise ValueError(f"lengths must not be negative, got {lengths}")


def pages_for(num_tokens: int, page_size: int) -> int:
    _check(page_size, num_tokens)
    return -(-num_tokens // page_size)


def pages_to_allocate(cur_len: int, extend_len: int, page_size: int) -> int:
    _check(page_size, cur_len, extend_len)
    return pages_for(cur_len + extend_len, page_size) - pages_for(cur_len, page_size)


def release(seq_len: int, page_size: int, keep_full_pages: bool) -> tuple[int, int]:
    _check(page_size, seq_len)
    kept = seq_len // page_size if keep_full_pages else 0
    return kept, pages_for(seq_len, page_size) - kept
