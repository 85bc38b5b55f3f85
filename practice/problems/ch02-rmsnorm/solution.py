import math


def rms_norm(x: list[list[float]], weight: list[float], eps: float) -> list[list[float]]:
    out = []
    for row in x:
        if len(row) != len(weight):
            raise ValueError(f"row of length {len(row)} does not match weight of length {len(weight)}")
        inv = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
        out.append([w * v * inv for w, v in zip(weight, row)])
    return out


def fused_add_rms_norm(x, residual, weight, eps):
    if residual is None:
        summed = [list(row) for row in x]
    else:
        if len(x) != len(residual) or any(len(a) != len(b) for a, b in zip(x, residual)):
            raise ValueError("x and residual must have the same shape")
        summed = [[a + b for a, b in zip(ra, rb)] for ra, rb in zip(x, residual)]
    return rms_norm(summed, weight, eps), summed
