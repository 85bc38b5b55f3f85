import math


def route(logits: list[list[float]], k: int, renormalize: bool) -> list[list[tuple[int, float]]]:
    """Per token: its k (expert, weight) pairs, best first."""
    out = []
    for row in logits:
        if not 1 <= k <= len(row):
            raise ValueError(f"k={k} with {len(row)} experts")
        peak = max(row)
        exp = [math.exp(v - peak) for v in row]
        total = sum(exp)
        best = sorted(range(len(row)), key=lambda e: (-row[e], e))[:k]
        kept = [(e, exp[e] / total) for e in best]
        if renormalize:
            s = sum(w for _, w in kept)
            kept = [(e, w / s) for e, w in kept]
        out.append(kept)
    return out
