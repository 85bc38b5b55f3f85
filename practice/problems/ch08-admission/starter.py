def admit(waiting: list[tuple[str, int, int, int]], free_pages: int, page_size: int,
          free_slots: int) -> dict:
    """waiting: (uid, prompt_len, cached_len, max_tokens) in queue order. Admit in order while a slot is
    free and ceil((prompt_len - cached_len + max_tokens - 1) / page_size) pages fit; stop at the first that
    does not. Returns {"admitted": [...], "waiting": [...], "free_pages": int}."""
    raise NotImplementedError
