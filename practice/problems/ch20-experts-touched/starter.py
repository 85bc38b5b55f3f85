from fractions import Fraction


def expected_experts(E: int, k: int, T: int) -> Fraction:
    """Expected number of distinct experts used by T tokens, each on k uniformly random distinct experts."""
    raise NotImplementedError


def expected_weight_bytes(E: int, k: int, T: int, expert_bytes: int) -> Fraction:
    """Expected bytes of expert weights those T tokens read."""
    raise NotImplementedError
