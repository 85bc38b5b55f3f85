def apply_penalties(logits: list[float], prompt: list[int], output: list[int], presence: float = 0.0,
                    frequency: float = 0.0, repetition: float = 1.0) -> list[float]:
    if not -2.0 <= presence <= 2.0 or not -2.0 <= frequency <= 2.0:
        raise ValueError(f"presence and frequency must be in [-2, 2], got {presence} and {frequency}")
    if repetition <= 0:
        raise ValueError(f"repetition must be > 0 (1 is off), got {repetition}")
    for token in prompt + output:
        if not 0 <= token < len(logits):
            raise ValueError(f"token id {token} is outside the vocabulary of {len(logits)}")
    out = list(logits)
    for token in set(prompt) | set(output):  # once per token, however often it occurs
        x = out[token]
        out[token] = x / repetition if x > 0 else x * repetition
    counts: dict[int, int] = {}
    for token in output:
        counts[token] = counts.get(token, 0) + 1
    for token, count in counts.items():
        out[token] -= frequency * count + presence
    return out
