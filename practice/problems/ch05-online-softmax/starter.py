def partial(scores: list[float], values: list[list[float]]) -> tuple[list[float], float, float]:
    """(out, m, s) of one non-empty chunk: m = max score, s = sum exp(x - m),
    out = sum exp(x - m) * v / s."""
    raise NotImplementedError


def merge(a: tuple[list[float], float, float], b: tuple[list[float], float, float]) -> tuple[list[float], float, float]:
    """The partial of both chunks together, computed from the two partials only."""
    raise NotImplementedError
