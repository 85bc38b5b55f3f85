from fractions import Fraction


def residual(p: dict, q: dict) -> dict:
    """normalise(max(p - q, 0)): the distribution a rejected draft is replaced from. p is the target's
    distribution, q the draft's (token -> Fraction). {} when p == q."""
    raise NotImplementedError


def acceptance_probability(p: dict, q: dict) -> Fraction:
    """The probability that a draft x drawn from q is accepted (with probability min(1, p(x) / q(x)))."""
    raise NotImplementedError


def emitted_distribution(p: dict, q: dict) -> dict:
    """The exact distribution of the token emitted at the position: the draft if accepted, else a token
    drawn from residual(p, q). Only tokens of positive probability are keys."""
    raise NotImplementedError
