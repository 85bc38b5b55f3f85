def reserved_pages(prompt_len: int, cached_len: int, max_tokens: int, page_size: int) -> int:
    return -(-(prompt_len - cached_len + max_tokens - 1) // page_size)


def admit(waiting: list[tuple[str, int, int, int]], free_pages: int, page_size: int,
          free_slots: int) -> dict:
    for uid, prompt_len, cached_len, max_tokens in waiting:
        if cached_len < 0 or cached_len % page_size or cached_len >= prompt_len:
            raise ValueError(f"{uid}: cached_len {cached_len} must be a whole number of pages below {prompt_len}")
        if max_tokens < 1:
            raise ValueError(f"{uid}: max_tokens must be at least 1")
    admitted = []
    for uid, prompt_len, cached_len, max_tokens in waiting:
        need = reserved_pages(prompt_len, cached_len, max_tokens, page_size)
        if len(admitted) >= free_slots or need > free_pages:
            break
        admitted.append(uid)
        free_pages -= need
    return {"admitted": admitted, "waiting": [w[0] for w in waiting[len(admitted):]], "free_pages": free_pages}
