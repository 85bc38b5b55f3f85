def combine(partials: list[tuple[float, float, list[float]]]) -> list[float]:
    """Attention output over all keys from per-block (m, l, o) partials: m = block max score,
    l = sum exp(x - m), o = sum exp(x - m) * v / l. Blocks (-inf, 0.0, [0.0] * d) are empty and ignored.
    ValueError if partials is empty, every block is empty, or the o lists differ in length."""
    raise NotImplementedError
