def plan_chunks(prompt_lens: list[int], budget: int, arrivals: list[int] | None = None) -> list[list[tuple[int, int, int]]]:
    """One list of (req, start, end) chunks per scheduling step; see the statement for the rules."""
    raise NotImplementedError
