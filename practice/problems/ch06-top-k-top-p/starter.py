def surviving_tokens(probs: list[float], k: int, p: float) -> list[int]:
    """Token ids kept by top-k (k <= 0: no limit) then top-p on the original probabilities,
    most probable first, ties broken by the lower id. The best token always survives."""
    raise NotImplementedError
