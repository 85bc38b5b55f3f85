def apply_bitmask(logits: list[float], bitmask: list[int]) -> list[float]:
    vocab = len(logits)
    if len(bitmask) != (vocab + 31) // 32:
        raise ValueError(f"a vocabulary of {vocab} needs {(vocab + 31) // 32} words, got {len(bitmask)}")
    for word in bitmask:
        if not -2**31 <= word < 2**31:
            raise ValueError(f"{word} is not a signed 32-bit word")
    out = list(logits)
    for t in range(vocab):  # the bits past the vocabulary's end in the last word are never read
        if not (bitmask[t // 32] >> (t % 32)) & 1:  # >> keeps the sign: bit 31 of a negative word reads as 1
            out[t] = float("-inf")
    return out


def pack(allowed: list[int], vocab: int) -> list[int]:
    if vocab < 0:
        raise ValueError(f"vocab must be >= 0, got {vocab}")
    words = [0] * ((vocab + 31) // 32)
    for t in allowed:
        if not 0 <= t < vocab:
            raise ValueError(f"token id {t} is outside the vocabulary of {vocab}")
        words[t // 32] |= 1 << (t % 32)
    return [w - 2**32 if w >= 2**31 else w for w in words]  # bit 31 set: the word is negative as an int32
