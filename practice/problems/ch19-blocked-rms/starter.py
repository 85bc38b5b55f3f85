def partial(block: list[float]) -> tuple[int, float, float]:
    """(count, scale, ssq): scale = max |x|, ssq = sum((x / scale) ** 2); (0, 0.0, 0.0) for an empty block."""
    raise NotImplementedError


def combine(a: tuple[int, float, float], b: tuple[int, float, float]) -> tuple[int, float, float]:
    """The state of both blocks: counts add, ssq rescaled to the larger scale; never divide by a zero scale."""
    raise NotImplementedError


def rms(row: list[float], block: int) -> float:
    """sqrt(mean(x ** 2)) from per-block states merged pairwise in a tree. ValueError for an empty row or block < 1."""
    raise NotImplementedError
