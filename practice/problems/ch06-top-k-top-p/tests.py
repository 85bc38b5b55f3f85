import random

from solution import surviving_tokens

EXAMPLES = ["test_statement_example", "test_no_limits_keeps_everything_in_rank_order"]


def test_statement_example():
    got = surviving_tokens([0.125, 0.5, 0.125, 0.25], k=3, p=0.7)
    assert got == [1, 3], f"expected [1, 3], got {got}"


def test_no_limits_keeps_everything_in_rank_order():
    got = surviving_tokens([0.125, 0.5, 0.125, 0.25], k=0, p=1.0)
    assert got == [1, 3, 0, 2], f"k=0 and p=1.0 filter nothing; ties (ids 0 and 2) go lower id first; got {got}"


def test_top_k_alone():
    got = surviving_tokens([0.25, 0.25, 0.25, 0.25], k=2, p=1.0)
    assert got == [0, 1], f"four-way tie, k=2: the two lowest ids survive; got {got}"
    got = surviving_tokens([0.125, 0.5, 0.125, 0.25], k=-1, p=1.0)
    assert got == [1, 3, 0, 2], f"a negative k means no top-k limit; got {got}"


def test_top_p_boundary_uses_mass_before_the_token():
    probs = [0.25, 0.5, 0.25]
    got = surviving_tokens(probs, k=0, p=0.5)
    assert got == [1], f"0.5 already reaches p=0.5, so nothing after token 1 survives; got {got}"
    got = surviving_tokens(probs, k=0, p=0.5625)
    assert got == [1, 0], f"mass before token 0 is 0.5 < 0.5625 (keep), before token 2 is 0.75 (drop); got {got}"
    got = surviving_tokens(probs, k=0, p=1.0)
    assert got == [1, 0, 2], f"p=1.0: the mass before the last token is 0.75 < 1; got {got}"


def test_top_p_uses_original_not_renormalised_probabilities():
    # after top-k 2 the kept mass is 0.75; renormalised, token 1 would have 0.667 >= 0.6 and end the
    # nucleus, but on the original probabilities 0.5 < 0.6 so token 3 survives too
    got = surviving_tokens([0.125, 0.5, 0.125, 0.25], k=2, p=0.6)
    assert got == [1, 3], f"top-p must look at the original probabilities; got {got}"


def test_best_token_always_survives():
    got = surviving_tokens([0.0625, 0.9375], k=1, p=1e-9)
    assert got == [1], f"a tiny p still keeps the most probable token; got {got}"
    got = surviving_tokens([1.0], k=5, p=0.3)
    assert got == [0], f"one-token vocabulary, k larger than the vocabulary; got {got}"


def test_invalid_arguments():
    for args in (([], 1, 0.5), ([0.5, 0.5], 1, 0.0), ([0.5, 0.5], 1, 1.5), ([0.5, 0.5], 1, -0.1)):
        try:
            surviving_tokens(*args)
        except ValueError:
            continue
        raise AssertionError(f"surviving_tokens{args} should raise ValueError")


def _oracle(probs, k, p):
    """Decide each token on its own: its rank, and the mass of every token ranked before it."""
    kept = []
    for i in range(len(probs)):
        better = [j for j in range(len(probs)) if probs[j] > probs[i] or (probs[j] == probs[i] and j < i)]
        rank = len(better)
        before = sum(sorted(probs[j] for j in better))  # exact: all probabilities are multiples of 1/64
        if rank == 0 or ((k <= 0 or rank < k) and before < p):
            kept.append((rank, i))
    return [i for _, i in sorted(kept)]


def test_random_against_a_per_token_oracle():
    rng = random.Random(6)
    for _ in range(300):
        n = rng.randint(1, 12)
        cuts = sorted(rng.randint(0, 64) for _ in range(n - 1))
        weights = [b - a for a, b in zip([0] + cuts, cuts + [64])]  # n weights summing to 64, ties likely
        probs = [w / 64 for w in weights]
        k = rng.choice([-1, 0, 1, 2, 3, n, n + 2])
        p = rng.choice([1.0, rng.randint(1, 64) / 64, rng.random()])
        want = _oracle(probs, k, p)
        got = surviving_tokens(probs, k, p)
        assert got == want, f"surviving_tokens({probs}, k={k}, p={p}): expected {want}, got {got}"
