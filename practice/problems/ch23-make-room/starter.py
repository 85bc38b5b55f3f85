def make_room(running: list[tuple[str, int, int]], available: int, page_size: int, policy: str,
              pinned: set[str]) -> dict:
    """running: (uid, prompt_len, generated) in admission order. Retract requests (by `policy`, never a pinned
    one, never the last) until the new pages of the step fit in `available`.
    Returns {"retract": [...], "keep": [...], "fits": bool}."""
    raise NotImplementedError
