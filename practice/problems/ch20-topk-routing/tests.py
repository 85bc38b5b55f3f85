import itertools
import math
import random

from solution import route

EXAMPLES = ["test_uniform_logits", "test_renormalized", "test_top_one"]


def close(a, b, tol=1e-9):
    return abs(a - b) <= tol * max(1.0, abs(b))


def check(got, want):
    assert len(got) == len(want), f"{len(got)} tokens, want {len(want)}"
    for t, (g, w) in enumerate(zip(got, want)):
        got_experts, want_experts = [e for e, _ in g], [e for e, _ in w]
        assert got_experts == want_experts, f"token {t}: experts {got_experts}, want {want_experts}"
        for (e, gw), (_, ww) in zip(g, w):
            assert close(gw, ww), f"token {t}, expert {e}: weight {gw}, want {ww}"


def test_uniform_logits():
    check(route([[0.0, 0.0, 0.0, 0.0]], 2, False), [[(0, 0.25), (1, 0.25)]])


def test_renormalized():
    check(route([[0.0, 0.0, 0.0, 0.0]], 2, True), [[(0, 0.5), (1, 0.5)]])


def test_top_one():
    check(route([[1.0, 3.0, 2.0]], 1, True), [[(1, 1.0)]])


def test_softmax_over_all_experts_without_renormalizing():
    # softmax of [ln 1, ln 2, ln 3, ln 4] is [0.1, 0.2, 0.3, 0.4]
    logits = [[math.log(1), math.log(2), math.log(3), math.log(4)]]
    check(route(logits, 2, False), [[(3, 0.4), (2, 0.3)]])
    check(route(logits, 2, True), [[(3, 4 / 7), (2, 3 / 7)]])


def test_large_logits_do_not_overflow():
    check(route([[1000.0, 1000.0, 0.0]], 2, False), [[(0, 0.5), (1, 0.5)]])


def test_bad_k_is_refused():
    for k in (0, 4):
        try:
            route([[1.0, 2.0, 3.0]], k, True)
        except ValueError:
            continue
        raise AssertionError(f"k={k} with 3 experts should raise ValueError")


def brute(row, k, renormalize):
    # Every k-subset, scored by its sum of logits, ties by the smaller expert numbers: the best one is the top k.
    e_sum = sum(math.exp(v) for v in row)
    probs = [math.exp(v) / e_sum for v in row]
    best = max(itertools.combinations(range(len(row)), k),
               key=lambda c: (sum(row[e] for e in c), [-e for e in c]))
    best = sorted(best, key=lambda e: (-row[e], e))
    s = sum(probs[e] for e in best) if renormalize else 1.0
    return [(e, probs[e] / s) for e in best]


def test_random_rows_against_brute_force():
    rng = random.Random(20)
    for _ in range(200):
        n = rng.randint(1, 7)
        row = [float(rng.randint(-3, 3)) for _ in range(n)]  # small integers: ties happen
        k = rng.randint(1, n)
        for renormalize in (True, False):
            check(route([row], k, renormalize), [brute(row, k, renormalize)])
