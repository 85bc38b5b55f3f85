import copy
import math
import random

from solution import fused_add_rms_norm, rms_norm

EXAMPLES = ["test_statement_example", "test_fused_statement_example"]
TOL = 1e-9


def close(a, b):
    return len(a) == len(b) and all(len(ra) == len(rb) and all(abs(u - v) <= TOL * max(1.0, abs(v)) for u, v in zip(ra, rb))
                                    for ra, rb in zip(a, b))


def oracle(x, weight, eps):
    """The formula, term by term, with math.fsum."""
    return [[weight[i] * row[i] / math.sqrt(math.fsum(v ** 2 for v in row) / len(row) + eps) for i in range(len(row))]
            for row in x]


def test_statement_example():
    got = rms_norm([[3.0, 4.0]], [1.0, 2.0], 0.0)
    rms = math.sqrt(12.5)
    expected = [[3.0 / rms, 8.0 / rms]]
    assert close(got, expected), f"expected {expected}, got {got}"


def test_fused_statement_example():
    normed, res = fused_add_rms_norm([[1.0, 1.0]], [[2.0, 3.0]], [1.0, 1.0], 0.0)
    assert res == [[3.0, 4.0]], f"new_residual is x + residual = [[3.0, 4.0]], got {res}"
    rms = math.sqrt(12.5)
    assert close(normed, [[3.0 / rms, 4.0 / rms]]), f"normed is rms_norm(x + residual), got {normed}"


def test_each_row_on_its_own():
    x = [[1.0, 1.0, 1.0, 1.0], [2.0, -2.0, 2.0, -2.0], [0.5, 0.0, 0.0, 0.0]]
    got = rms_norm(x, [1.0] * 4, 0.0)
    expected = [[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0], [2.0, 0.0, 0.0, 0.0]]
    assert close(got, expected), f"every row is normalized by its own RMS: expected {expected}, got {got}"


def test_zero_row_and_eps():
    got = rms_norm([[0.0, 0.0, 0.0]], [1.0, 1.0, 1.0], 1e-6)
    assert got == [[0.0, 0.0, 0.0]], f"eps keeps a zero row finite: expected zeros, got {got}"
    got = rms_norm([[1.0, 1.0]], [1.0, 1.0], 3.0)
    assert close(got, [[0.5, 0.5]]), f"eps goes inside the sqrt: 1 / sqrt(1 + 3) = 0.5, got {got}"
    assert rms_norm([], [1.0], 1e-6) == [], "no rows, no output"


def test_residual_none_and_inputs_untouched():
    x = [[1.0, -2.0, 3.0]]
    normed, res = fused_add_rms_norm(x, None, [1.0, 1.0, 1.0], 1e-6)
    assert res == x and res is not x and res[0] is not x[0], "with no residual, new_residual is a copy of x"
    assert close(normed, oracle(x, [1.0, 1.0, 1.0], 1e-6)), \
        f"with no residual, normed is rms_norm(x): expected {oracle(x, [1.0, 1.0, 1.0], 1e-6)}, got {normed}"
    x, r, w = [[1.0, 2.0]], [[0.5, -1.0]], [2.0, 3.0]
    saved = copy.deepcopy((x, r, w))
    fused_add_rms_norm(x, r, w, 1e-6)
    rms_norm(x, w, 1e-6)
    assert (x, r, w) == saved, "the inputs must not be modified"


def test_shape_errors():
    cases = [(rms_norm, ([[1.0, 2.0, 3.0]], [1.0, 1.0], 1e-6)),
             (fused_add_rms_norm, ([[1.0, 2.0]], [[1.0, 2.0], [3.0, 4.0]], [1.0, 1.0], 1e-6)),
             (fused_add_rms_norm, ([[1.0, 2.0]], [[1.0]], [1.0, 1.0], 1e-6))]
    for fn, args in cases:
        try:
            fn(*args)
        except ValueError:
            continue
        raise AssertionError(f"{fn.__name__} with mismatched shapes should raise ValueError: {args}")


def test_random_rows_against_the_formula():
    rng = random.Random(4)
    for _ in range(300):
        d = rng.randint(1, 6)
        x = [[rng.uniform(-5, 5) for _ in range(d)] for _ in range(rng.randint(1, 3))]
        r = [[rng.uniform(-5, 5) for _ in range(d)] for _ in x]
        w = [rng.uniform(-2, 2) for _ in range(d)]
        eps = rng.choice([0.0, 1e-6, 1e-5, 0.1])
        got, want = rms_norm(x, w, eps), oracle(x, w, eps)
        assert close(got, want), f"rms_norm differs from the formula (eps={eps}): expected {want}, got {got}"
        normed, res = fused_add_rms_norm(x, r, w, eps)
        s = [[a + b for a, b in zip(ra, rb)] for ra, rb in zip(x, r)]
        assert close(res, s), "new_residual should be x + residual"
        assert close(normed, oracle(s, w, eps)), "normed should be rms_norm(x + residual)"
        if eps == 0.0:
            scaled = rms_norm([[7.5 * v for v in row] for row in x], w, 0.0)
            assert close(scaled, rms_norm(x, w, 0.0)), "with eps 0 RMSNorm ignores a positive scale of the row"
