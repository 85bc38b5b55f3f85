def inv_freq(head_dim: int, theta: float) -> list[float]:
    """theta ** (-2i / head_dim) for each of the head_dim / 2 pairs."""
    raise NotImplementedError


def llama3_scale(freqs: list[float], factor: float, low_freq_factor: float, high_freq_factor: float,
                 original_max_position: int) -> list[float]:
    """Keep fast frequencies, divide slow ones by factor, blend the band between."""
    raise NotImplementedError


def apply_rope(x: list[float], position: int, freqs: list[float]) -> list[float]:
    """Rotate pair (x[i], x[i + h]) by position * freqs[i], h = len(freqs)."""
    raise NotImplementedError
