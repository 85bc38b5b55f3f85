def pages_for(num_tokens: int, page_size: int) -> int:
    """Pages a sequence of num_tokens tokens occupies."""
    raise NotImplementedError


def pages_to_allocate(cur_len: int, extend_len: int, page_size: int) -> int:
    """New pages needed to grow a sequence from cur_len to cur_len + extend_len tokens."""
    raise NotImplementedError


def release(seq_len: int, page_size: int, keep_full_pages: bool) -> tuple[int, int]:
    """(kept, freed) pages when a sequence of seq_len tokens finishes."""
    raise NotImplementedError
