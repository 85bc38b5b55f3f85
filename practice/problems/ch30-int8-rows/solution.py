def quantize_rows(rows: list) -> tuple:
    """Per-row symmetric INT8: (codes, scales) with row o ~ codes[o] * scales[o]; scale = max|row| / 127 (1.0 for an
    all-zero row), codes round(value / scale) clamped to [-127, 127]."""
    if not rows:
        raise ValueError("no rows")
    width = len(rows[0])
    if width == 0 or any(len(r) != width for r in rows):
        raise ValueError("rows must all have the same, non-zero length")
    codes, scales = [], []
    for row in rows:
        amax = max(abs(v) for v in row)
        scale = amax / 127 if amax > 0 else 1.0
        codes.append([max(-127, min(127, round(v / scale))) for v in row])
        scales.append(scale)
    return codes, scales


def int8_matvec(codes: list, scales: list, x: list, bias: list | None = None) -> list:
    """y[o] = scales[o] * sum_k codes[o][k] * x[k] (+ bias[o], unscaled)."""
    if len(codes) != len(scales):
        raise ValueError(f"{len(codes)} rows of codes but {len(scales)} scales")
    if any(len(row) != len(x) for row in codes):
        raise ValueError(f"x has {len(x)} values, the rows do not")
    if bias is not None and len(bias) != len(codes):
        raise ValueError(f"bias has {len(bias)} values for {len(codes)} outputs")
    out = []
    for o, row in enumerate(codes):
        y = scales[o] * sum(c * v for c, v in zip(row, x))
        out.append(y if bias is None else y + bias[o])
    return out
