import math
import random

from solution import combine

EXAMPLES = ["test_statement_example", "test_extreme_scores"]
REL = 1e-9
EMPTY1 = (float("-inf"), 0.0, [0.0])


def direct(scores, values):
    """Oracle: one max-subtracted softmax over every score, then the weighted sum of the values."""
    m = max(scores)
    w = [math.exp(x - m) for x in scores]
    s = sum(w)
    return [sum(wi * v[j] for wi, v in zip(w, values)) / s for j in range(len(values[0]))]


def block(scores, values, d):
    """The (m, l, o) partial of one block of keys, as a split-K program would write it."""
    if not scores:
        return float("-inf"), 0.0, [0.0] * d
    m = max(scores)
    w = [math.exp(x - m) for x in scores]
    l = sum(w)
    return m, l, [sum(wi * v[j] for wi, v in zip(w, values)) / l for j in range(d)]


def close(got, want, what):
    assert isinstance(got, list), f"{what}: expected a list of floats, got {type(got).__name__}"
    assert len(got) == len(want), f"{what}: {len(got)} numbers, expected {len(want)}"
    for j, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= REL * max(1.0, abs(w)), f"{what}: element {j} is {g}, expected {w}"


def _raises(partials):
    try:
        combine(partials)
    except ValueError:
        return True
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"combine({partials!r}) raised {type(e).__name__}: {e}; expected ValueError") from e
    return False


def test_statement_example():
    close(combine([(0.0, 2.0, [2.0, 0.0]), (math.log(2), 1.0, [0.0, 4.0])]), [1.0, 2.0],
          "two blocks of equal total weight")
    close(combine([(1000.0, 1.0, [2.0]), EMPTY1, (1000.0 + math.log(3), 1.0, [6.0])]), [5.0],
          "weights 1/4 and 3/4, the empty block ignored")


def test_single_block_is_its_own_output():
    close(combine([(0.7, 3.5, [1.5, -2.0, 0.25])]), [1.5, -2.0, 0.25], "one block: the output is o itself")
    close(combine([EMPTY1, (-3.0, 2.0, [4.0]), EMPTY1]), [4.0], "one live block among empty ones")


def test_extreme_scores():
    scores = [1000.0, 999.0, -1000.0, 1000.5, -1000.0, 0.0]
    values = [[1.0, 2.0], [3.0, -1.0], [100.0, 100.0], [-2.0, 0.5], [7.0, 7.0], [50.0, -50.0]]
    parts = [block(scores[i:j], values[i:j], 2) for i, j in [(0, 2), (2, 3), (3, 5), (5, 6)]]
    close(combine(parts), direct(scores, values), "scores of +-1000 in different blocks")
    close(combine(parts[::-1]), direct(scores, values), "same blocks in reverse order")
    low = [block([-1000.0], [[1.0]], 1), block([-1001.0], [[2.0]], 1)]
    close(combine(low), direct([-1000.0, -1001.0], [[1.0], [2.0]]), "every score near -1000: exp underflows if not shifted")


def test_empty_blocks_are_ignored():
    a = block([0.5, 1.5], [[1.0, -1.0], [3.0, 2.0]], 2)
    empty = (float("-inf"), 0.0, [0.0, 0.0])
    want = direct([0.5, 1.5], [[1.0, -1.0], [3.0, 2.0]])
    close(combine([empty, a]), want, "empty block first")
    close(combine([a, empty, empty]), want, "empty blocks last")


def test_bad_input_is_refused():
    assert _raises([]), "no partials at all: ValueError expected"
    assert _raises([EMPTY1, EMPTY1]), "every block is empty: ValueError expected"
    assert _raises([(0.0, 1.0, [1.0, 2.0]), (0.0, 1.0, [1.0])]), "o lists of length 2 and 1: ValueError expected"
    assert _raises([(0.0, 1.0, [1.0]), (float("-inf"), 0.0, [0.0, 0.0])]), "an empty block of the wrong width is still an error"


def test_random_splits_match_direct_softmax():
    rng = random.Random(1717)
    for trial in range(300):
        n, d = rng.randint(1, 40), rng.randint(1, 5)
        shift = rng.choice([0.0, 30.0, -500.0, 1000.0, -1000.0])
        spread = rng.choice([1.0, 10.0, 2000.0])
        scores = [shift + rng.uniform(-spread, spread) for _ in range(n)]
        values = [[rng.uniform(-3, 3) for _ in range(d)] for _ in range(n)]
        cuts = sorted(rng.randint(0, n) for _ in range(rng.randint(0, 6)))  # repeats make empty blocks
        bounds = [0] + cuts + [n]
        parts = [block(scores[i:j], values[i:j], d) for i, j in zip(bounds, bounds[1:])]
        close(combine(parts), direct(scores, values),
              f"trial {trial}: {len(parts)} blocks at {bounds}, scores around {shift} +- {spread}")
