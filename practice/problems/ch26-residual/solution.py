from fractions import Fraction


def _check(dist: dict, name: str) -> None:
    for token, prob in dist.items():
        if prob < 0:
            raise ValueError(f"{name}[{token!r}] = {prob} is negative")
    if sum(dist.values()) != 1:
        raise ValueError(f"{name} sums to {sum(dist.values())}, not 1")


def residual(p: dict, q: dict) -> dict:
    _check(p, "p")
    _check(q, "q")
    excess = {t: p[t] - q.get(t, 0) for t in p if p[t] > q.get(t, 0)}  # max(p - q, 0), its positive entries
    total = sum(excess.values())  # = 1 - acceptance_probability(p, q): 0 only when p == q
    return {t: Fraction(e) / total for t, e in excess.items()}


def acceptance_probability(p: dict, q: dict) -> Fraction:
    _check(p, "p")
    _check(q, "q")
    return Fraction(sum(min(prob, p.get(t, 0)) for t, prob in q.items()))  # sum of q(x) min(1, p(x) / q(x))


def emitted_distribution(p: dict, q: dict) -> dict:
    _check(p, "p")
    _check(q, "q")
    out: dict = {}
    rejected = Fraction(0)
    for x, qx in q.items():
        if qx == 0:
            continue
        accept = min(Fraction(1), Fraction(p.get(x, 0)) / qx)  # the draft x is kept with this probability
        out[x] = out.get(x, 0) + qx * accept
        rejected += qx * (1 - accept)
    for t, r in residual(p, q).items():  # a rejection draws its replacement from the residual
        out[t] = out.get(t, 0) + rejected * r
    return {t: Fraction(v) for t, v in out.items() if v > 0}
