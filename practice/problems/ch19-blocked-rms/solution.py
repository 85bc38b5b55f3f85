import math


def partial(block):
    scale = max((abs(x) for x in block), default=0.0)
    if scale == 0.0:
        return len(block), 0.0, 0.0
    return len(block), scale, sum((x / scale) ** 2 for x in block)


def combine(a, b):
    (na, sa, qa), (nb, sb, qb) = a, b
    if sa < sb:
        (na, sa, qa), (nb, sb, qb) = (nb, sb, qb), (na, sa, qa)
    if sa == 0.0:  # both blocks are zeros (or empty)
        return na + nb, 0.0, 0.0
    return na + nb, sa, qa + qb * (sb / sa) ** 2


def rms(row, block):
    if not row or block < 1:
        raise ValueError("need a non-empty row and block >= 1")
    states = [partial(row[i : i + block]) for i in range(0, len(row), block)]
    while len(states) > 1:
        merged = [combine(states[i], states[i + 1]) for i in range(0, len(states) - 1, 2)]
        if len(states) % 2:
            merged.append(states[-1])
        states = merged
    count, scale, ssq = states[0]
    return scale * math.sqrt(ssq / count)
