def apply_bitmask(logits: list[float], bitmask: list[int]) -> list[float]:
    """The logits with every token the bitmask does not allow set to -inf. Bit j of word i allows token
    32 * i + j; the words are signed 32-bit ints. Returns a new list."""
    raise NotImplementedError


def pack(allowed: list[int], vocab: int) -> list[int]:
    """The bitmask (ceil(vocab / 32) signed 32-bit words) that allows exactly the token ids in `allowed`."""
    raise NotImplementedError
