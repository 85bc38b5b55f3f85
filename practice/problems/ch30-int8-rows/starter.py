def quantize_rows(rows: list) -> tuple:
    """Per-row symmetric INT8: (codes, scales) with row o ~ codes[o] * scales[o]; scale = max|row| / 127 (1.0 for an
    all-zero row), codes round(value / scale) clamped to [-127, 127]."""
    raise NotImplementedError


def int8_matvec(codes: list, scales: list, x: list, bias: list | None = None) -> list:
    """y[o] = scales[o] * sum_k codes[o][k] * x[k] (+ bias[o], unscaled)."""
    raise NotImplementedError
