import math
import random

from solution import merge, partial

EXAMPLES = ["test_statement_example", "test_large_scores_do_not_overflow"]
TOL = 1e-9


def direct(scores, values):
    """Oracle: one softmax over every score (max-subtracted), then the weighted sum."""
    m = max(scores)
    w = [math.exp(x - m) for x in scores]
    s = sum(w)
    return [sum(wi * v[j] for wi, v in zip(w, values)) / s for j in range(len(values[0]))], m, s


def close(got, want, what):
    (go, gm, gs), (wo, wm, ws) = got, want
    assert len(go) == len(wo), f"{what}: output has {len(go)} numbers, expected {len(wo)}"
    assert all(abs(x - y) <= TOL for x, y in zip(go, wo)), f"{what}: out {go}, expected {wo}"
    assert abs(gm - wm) <= TOL, f"{what}: m = {gm}, expected the max score {wm}"
    assert abs(gs - ws) <= TOL * max(1.0, abs(ws)), f"{what}: s = {gs}, expected {ws} (relative to m)"


def test_statement_example():
    a = partial([0.0], [[1.0, 0.0]])
    b = partial([0.0], [[0.0, 1.0]])
    close(a, ([1.0, 0.0], 0.0, 1.0), "partial([0.0], [[1.0, 0.0]])")
    close(merge(a, b), ([0.5, 0.5], 0.0, 2.0), "merge of two equal-score chunks")
    got = merge(partial([1000.0], [[2.0]]), partial([1000.0 + math.log(3)], [[6.0]]))
    close(got, ([5.0], 1000.0 + math.log(3), 4.0 / 3.0), "weights 1/4 and 3/4")


def test_partial_matches_direct_softmax():
    scores = [0.3, -1.2, 2.5, 0.0]
    values = [[1.0, 2.0], [-1.0, 0.5], [0.25, -3.0], [4.0, 4.0]]
    close(partial(scores, values), direct(scores, values), "partial of one chunk")


def test_large_scores_do_not_overflow():
    scores = [1000.0, 1002.0, 999.0, 1500.0, 1499.0]
    values = [[1.0], [2.0], [3.0], [4.0], [5.0]]
    a = partial(scores[:3], values[:3])
    b = partial(scores[3:], values[3:])
    close(merge(a, b), direct(scores, values), "scores around 1000-1500")
    close(merge(b, a), direct(scores, values), "same chunks, merged in the other order")


def test_very_negative_scores():
    scores = [-2000.0, -2001.0, -1000.0]
    values = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]
    close(merge(partial(scores[:2], values[:2]), partial(scores[2:], values[2:])), direct(scores, values),
          "one chunk is ~1000 below the other: its weight underflows to 0, no division by zero")


def test_empty_partial_is_an_identity():
    a = partial([0.5, 1.5], [[1.0, -1.0], [3.0, 2.0]])
    empty = ([0.0, 0.0], float("-inf"), 0.0)
    close(merge(a, empty), a, "merge(a, empty)")
    close(merge(empty, a), a, "merge(empty, a)")


def test_random_splits_match_direct_softmax():
    rng = random.Random(2024)
    for trial in range(200):
        n, d = rng.randint(1, 30), rng.randint(1, 6)
        shift = rng.choice([0.0, 50.0, -300.0, 800.0])
        scores = [shift + rng.uniform(-8, 8) for _ in range(n)]
        values = [[rng.uniform(-2, 2) for _ in range(d)] for _ in range(n)]
        cuts = sorted(rng.sample(range(1, n), rng.randint(0, n - 1))) if n > 1 else []
        bounds = [0] + cuts + [n]
        parts = [partial(scores[i:j], values[i:j]) for i, j in zip(bounds, bounds[1:])]
        while len(parts) > 1:  # merge neighbours in a random tree shape
            k = rng.randrange(len(parts) - 1)
            parts[k:k + 2] = [merge(parts[k], parts[k + 1])]
        close(parts[0], direct(scores, values), f"trial {trial}: {len(bounds) - 1} chunks, shift {shift}")
