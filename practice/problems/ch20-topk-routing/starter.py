def route(logits: list[list[float]], k: int, renormalize: bool) -> list[list[tuple[int, float]]]:
    """Per token: its k (expert, weight) pairs, best first."""
    raise NotImplementedError
