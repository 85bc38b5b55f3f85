def block_table_row(row: list[int], seq_len: int, page_size: int) -> list[int]:
    if page_size < 1:
        raise ValueError(f"page_size {page_size} < 1")
    if not 0 <= seq_len <= len(row):
        raise ValueError(f"seq_len {seq_len} is not in [0, {len(row)}]")
    pages = []
    for start in range(0, seq_len, page_size):
        first = row[start]
        if first < 0 or first % page_size != 0:
            raise ValueError(f"position {start} holds slot {first}, not the start of a page")
        for pos in range(start, min(start + page_size, seq_len)):
            if row[pos] != first + (pos - start):
                raise ValueError(f"position {pos} holds slot {row[pos]}, expected {first + pos - start}")
        pages.append(first // page_size)
    return pages
