def surviving_tokens(probs: list[float], k: int, p: float) -> list[int]:
    if not probs:
        raise ValueError("empty probability list")
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    order = sorted(range(len(probs)), key=lambda i: (-probs[i], i))
    if k > 0:
        order = order[:k]
    kept, before = [], 0.0
    for i in order:
        if kept and before >= p:
            break
        kept.append(i)
        before += probs[i]
    return kept
