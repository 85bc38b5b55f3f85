import math


def inv_freq(head_dim: int, theta: float) -> list[float]:
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim must be a positive even integer, got {head_dim!r}")
    return [1.0 / theta ** (2 * i / head_dim) for i in range(head_dim // 2)]


def llama3_scale(freqs, factor, low_freq_factor, high_freq_factor, original_max_position):
    low_freq_wavelen = original_max_position / low_freq_factor  # slower than this: scaled
    high_freq_wavelen = original_max_position / high_freq_factor  # faster than this: kept
    out = []
    for f in freqs:
        w = 2 * math.pi / f
        if w < high_freq_wavelen:
            out.append(f)
        elif w > low_freq_wavelen:
            out.append(f / factor)
        else:
            s = (original_max_position / w - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - s) * f / factor + s * f)
    return out


def apply_rope(x: list[float], position: int, freqs: list[float]) -> list[float]:
    h = len(freqs)
    if len(x) != 2 * h:
        raise ValueError(f"x has {len(x)} features, expected 2 * {h}")
    out = [0.0] * (2 * h)
    for i, f in enumerate(freqs):
        c, s = math.cos(position * f), math.sin(position * f)
        out[i] = x[i] * c - x[i + h] * s
        out[i + h] = x[i + h] * c + x[i] * s
    return out
