from fractions import Fraction


def expected_experts(E: int, k: int, T: int) -> Fraction:
    """Expected number of distinct experts used by T tokens, each on k uniformly random distinct experts."""
    if not 1 <= k <= E or T < 0:
        raise ValueError(f"need 1 <= k <= E and T >= 0, got E={E}, k={k}, T={T}")
    unused = (1 - Fraction(k, E)) ** T  # one expert, missed by every token
    return E * (1 - unused)


def expected_weight_bytes(E: int, k: int, T: int, expert_bytes: int) -> Fraction:
    """Expected bytes of expert weights those T tokens read."""
    return expected_experts(E, k, T) * expert_bytes
