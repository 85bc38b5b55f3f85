import math


def partial(scores, values):
    m = max(scores)
    weights = [math.exp(x - m) for x in scores]
    s = sum(weights)
    d = len(values[0])
    out = [sum(w * v[j] for w, v in zip(weights, values)) / s for j in range(d)]
    return out, m, s


def merge(a, b):
    out_a, m_a, s_a = a
    out_b, m_b, s_b = b
    m = max(m_a, m_b)
    if m == float("-inf"):  # both empty
        return list(out_a), m, 0.0
    w_a = s_a * math.exp(m_a - m)  # exp of a number <= 0: never overflows
    w_b = s_b * math.exp(m_b - m)
    s = w_a + w_b
    out = [(w_a * x + w_b * y) / s for x, y in zip(out_a, out_b)]
    return out, m, s
