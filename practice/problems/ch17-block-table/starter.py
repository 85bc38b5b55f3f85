def block_table_row(row: list[int], seq_len: int, page_size: int) -> list[int]:
    """Page ids of the pages holding positions 0 .. seq_len-1 of a per-position slot row, in order.
    ValueError if page_size < 1, seq_len is outside [0, len(row)], or a page's slots are not the
    consecutive slots of one page starting at a multiple of page_size."""
    raise NotImplementedError
