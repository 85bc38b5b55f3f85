def schedule(requests: list[tuple[str, int, int, int]], max_running: int,
             token_budget: int) -> list[tuple[str, list[str]]]:
    """requests: (uid, arrival_step, prompt_len, output_len). Returns one (kind, uids) per step,
    kind in "prefill" | "decode" | "idle", until every request has finished."""
    raise NotImplementedError
