def arrival_costs(prompt_len: int, budget: int, decoders: int, step_ms: float, token_ms: float) -> dict:
    """{"gap_off", "gap_on", "ttft_off", "ttft_on"} in milliseconds; see the statement."""
    raise NotImplementedError
