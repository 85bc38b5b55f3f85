import random
from fractions import Fraction as F

from solution import acceptance_probability, emitted_distribution, residual

EXAMPLES = ["test_statement_example", "test_the_emitted_token_follows_p"]

P = {0: F(1, 2), 1: F(1, 4), 2: F(1, 4)}
Q = {0: F(1, 4), 1: F(3, 4)}


def positive(dist):
    return {t: v for t, v in dist.items() if v > 0}


def brute_residual(p, q):
    tokens = set(p) | set(q)
    excess = {t: max(p.get(t, 0) - q.get(t, 0), 0) for t in tokens}
    total = sum(excess.values())
    return {t: F(e) / total for t, e in excess.items() if e > 0} if total else {}


def exact(dist, what):
    assert isinstance(dist, dict), f"{what}: return a dict token -> Fraction, got {dist!r}"
    for t, v in dist.items():
        assert isinstance(v, (F, int)) and not isinstance(v, bool), \
            f"{what}: probabilities must be exact Fractions, got {v!r} for token {t!r}"
        assert v > 0, f"{what}: only tokens of positive probability are keys, got {t!r}: {v}"


def test_statement_example():
    got = acceptance_probability(P, Q)
    assert got == F(1, 2), f"min(p, q) summed: 1/4 + 1/4 + 0 = 1/2; got {got!r}"
    got = residual(P, Q)
    exact(got, "residual(p, q)")
    assert got == {0: F(1, 2), 2: F(1, 2)}, \
        f"max(p - q, 0) = {{0: 1/4, 1: 0, 2: 1/4}}, divided by its sum 1/2; expected {{0: 1/2, 2: 1/2}}, got {got}"


def test_the_emitted_token_follows_p():
    got = emitted_distribution(P, Q)
    exact(got, "emitted_distribution(p, q)")
    assert got == P, (
        "token 0: drafted 1/4, always accepted, plus 1/2 rejected x 1/2; token 1: 3/4 x 1/3 accepted; token 2: "
        f"1/2 rejected x 1/2: expected p = {P}, got {got}")


def test_p_equal_to_q():
    p = {3: F(1, 3), 5: F(2, 3)}
    got = residual(p, dict(p))
    assert got == {}, f"p == q: every draft is accepted, nothing is left for the residual: expected {{}}, got {got}"
    got = acceptance_probability(p, {5: F(2, 3), 3: F(1, 3)})
    assert got == 1, f"p == q: the draft is always accepted; expected 1, got {got!r}"
    got = emitted_distribution(p, dict(p))
    assert got == p, f"p == q: expected p = {p}, got {got}"
    got = residual(p, {3: F(1, 3), 5: F(2, 3), 7: F(0)})
    assert got == {}, f"a token with probability 0 is as good as absent: p == q still; got {got}"


def test_a_point_mass_draft():
    # an n-gram proposer gives one token and no distribution: the draft is certain, q = {x: 1}
    p = {0: F(1, 10), 1: F(3, 5), 2: F(3, 10)}
    q = {1: F(1)}
    assert acceptance_probability(p, q) == F(3, 5), \
        f"q(1) = 1: the draft 1 is accepted with probability p(1) = 3/5; got {acceptance_probability(p, q)!r}"
    got = residual(p, q)
    assert got == {0: F(1, 4), 2: F(3, 4)}, \
        f"the residual is p without token 1, renormalised: expected {{0: 1/4, 2: 3/4}}, got {got}"
    assert emitted_distribution(p, q) == p, f"expected p = {p}, got {emitted_distribution(p, q)}"
    q = {4: 1}
    assert acceptance_probability(p, q) == 0, "a certain draft that p gives no mass is never accepted"
    assert residual(p, q) == p, f"... and the residual is p itself: expected {p}, got {residual(p, q)}"
    assert emitted_distribution(p, q) == p, f"expected p = {p}, got {emitted_distribution(p, q)}"


def test_q_with_no_mass_where_p_has_some():
    p = {0: F(1, 2), 1: F(1, 2)}
    q = {0: F(1, 3), 2: F(2, 3), 1: F(0)}
    got = residual(p, q)
    assert got == {0: F(1, 4), 1: F(3, 4)}, (
        "max(p - q, 0) = {0: 1/6, 1: 1/2, 2: 0} (token 2 has p = 0 < q, clamped), over 2/3: expected "
        f"{{0: 1/4, 1: 3/4}}, got {got}")
    assert acceptance_probability(p, q) == F(1, 3), f"only token 0 can be accepted: 1/3; got {acceptance_probability(p, q)!r}"
    assert emitted_distribution(p, q) == p, (
        f"token 1 is never drafted: all of its 1/2 must come from rejections; expected {p}, got {emitted_distribution(p, q)}")


def test_the_residual_clamps_then_renormalises():
    p = {0: F(1, 5), 1: F(1, 5), 2: F(3, 5)}
    q = {0: F(3, 5), 1: F(1, 5), 2: F(1, 5)}
    got = residual(p, q)
    assert got == {2: F(1)}, (
        "p - q = {0: -2/5, 1: 0, 2: 2/5}: the negative entry is clamped to 0 (not subtracted from the others) and "
        f"what is left renormalised: expected {{2: 1}}, got {got}")
    p = {0: F(1, 2), 1: F(1, 4), 2: F(1, 4)}
    q = {0: F(1, 8), 1: F(1, 8), 2: F(3, 4)}
    got = residual(p, q)
    assert got == {0: F(3, 4), 1: F(1, 4)}, \
        f"max(p - q, 0) = {{0: 3/8, 1: 1/8, 2: 0}} sums to 1/2: expected {{0: 3/4, 1: 1/4}}, got {got}"


def test_the_inputs_are_not_changed():
    p, q = dict(P), dict(Q)
    residual(p, q)
    acceptance_probability(p, q)
    emitted_distribution(p, q)
    assert p == P and q == Q, f"p and q must not be changed: now {p} and {q}"


def test_invalid_distributions():
    good = {0: F(1, 2), 1: F(1, 2)}
    bad = [
        {0: F(1, 2), 1: F(1, 4)},             # sums to 3/4
        {0: F(3, 2), 1: F(-1, 2)},            # sums to 1 with a negative entry
        {},                                    # sums to 0
        {0: F(1, 2), 1: F(1, 2), 2: F(1, 10)},  # sums to 11/10
    ]
    for fn in (residual, acceptance_probability, emitted_distribution):
        for b in bad:
            for p, q, which in ((b, good, "p"), (good, b, "q")):
                try:
                    fn(p, q)
                except ValueError:
                    continue
                raise AssertionError(f"{fn.__name__} with {which} = {b} should raise ValueError: a distribution "
                                     "has no negative entry and sums to exactly 1")


def random_distribution(rng, tokens):
    while True:
        weights = {t: rng.choice([0, 0, 1, 2, 3, 5, 8]) for t in rng.sample(tokens, rng.randint(1, len(tokens)))}
        total = sum(weights.values())
        if total:
            return {t: F(w, total) for t, w in weights.items()}


def test_random_distributions():
    rng = random.Random(26)
    tokens = list(range(7))
    for case in range(400):
        p = random_distribution(rng, tokens)
        kind = case % 5
        if kind == 0:
            q = {t: v for t, v in reversed(list(p.items()))}  # p == q
        elif kind == 1:
            q = {rng.choice(tokens): F(1)}  # a point mass, inside p's support or not
        elif kind == 2:  # q has no mass on part of p's support
            keep = [t for t in tokens if t not in p or rng.random() < 0.5] or [rng.choice(tokens)]
            q = random_distribution(rng, keep)
        else:
            q = random_distribution(rng, tokens)
        ctx = f"p = {p}, q = {q}"
        got = residual(dict(p), dict(q))
        exact(got, f"residual({ctx})")
        want = brute_residual(p, q)
        assert got == want, f"residual with {ctx}: expected normalise(max(p - q, 0)) = {want}, got {got}"
        assert (got == {}) == (positive(p) == positive(q)), f"{ctx}: the residual is empty exactly when p == q"
        got = acceptance_probability(dict(p), dict(q))
        want = sum(min(v, q.get(t, 0)) for t, v in p.items())
        assert got == want, f"acceptance_probability with {ctx}: expected sum of min(p, q) = {want}, got {got!r}"
        got = emitted_distribution(dict(p), dict(q))
        exact(got, f"emitted_distribution({ctx})")
        assert got == positive(p), f"emitted_distribution with {ctx}: expected p = {positive(p)}, got {got}"
