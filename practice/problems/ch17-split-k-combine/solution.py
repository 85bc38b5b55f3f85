import math


def combine(partials):
    if not partials:
        raise ValueError("no partials")
    d = len(partials[0][2])
    if any(len(o) != d for _, _, o in partials):
        raise ValueError("partial outputs have different lengths")
    live = [(m, l, o) for m, l, o in partials if m != float("-inf") and l > 0]
    if not live:
        raise ValueError("every block is empty")
    big_m = max(m for m, _, _ in live)
    weights = [l * math.exp(m - big_m) for m, l, _ in live]  # exp of a number <= 0: never overflows
    total = sum(weights)
    return [sum(w * o[j] for w, (_, _, o) in zip(weights, live)) / total for j in range(d)]
