def plan_steps(running: list[int], prompt_len: int, prompt_output: int, budget: int,
               mixed: bool) -> list[tuple[list[int], tuple[int, int] | None]]:
    """One (decode_ids, chunk) per step; see the statement for the rules."""
    raise NotImplementedError
