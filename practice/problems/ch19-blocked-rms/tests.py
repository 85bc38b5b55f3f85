import math
import random
from fractions import Fraction

from solution import combine, partial, rms

EXAMPLES = ["test_statement_examples", "test_huge_and_tiny_numbers"]
REL = 1e-12


def exact_rms(row):
    """Oracle: the mean of squares in exact rational arithmetic, relative to the largest magnitude."""
    big = max(abs(x) for x in row)
    if big == 0:
        return 0.0
    big_q = Fraction(big)
    mean = sum((Fraction(x) / big_q) ** 2 for x in row) / len(row)
    return big * math.sqrt(float(mean))


def close(got, want, what):
    assert isinstance(got, float), f"{what}: expected a float, got {type(got).__name__}"
    assert math.isfinite(got), f"{what}: got {got}"
    assert abs(got - want) <= REL * abs(want) or got == want, f"{what}: got {got!r}, expected {want!r}"


def state_close(got, want, what):
    assert len(got) == 3 and got[0] == want[0], f"{what}: got {got}, expected {want}"
    close(float(got[1]), want[1], f"{what} (scale)")
    close(float(got[2]), want[2], f"{what} (ssq)")


def _raises(row, block):
    try:
        rms(row, block)
    except ValueError:
        return True
    return False


def test_statement_examples():
    state_close(partial([3.0, -4.0]), (2, 4.0, 1.5625), "partial([3, -4])")
    state_close(combine((2, 4.0, 1.5625), (0, 0.0, 0.0)), (2, 4.0, 1.5625), "combine with the empty state")
    close(rms([3.0, -4.0, 0.0, 0.0], block=3), 2.5, "rms([3, -4, 0, 0], block=3)")
    close(rms([1e200, 1e200], block=1), 1e200, "rms([1e200, 1e200])")


def test_zeros_and_empty_states():
    assert tuple(partial([])) == (0, 0.0, 0.0), "the empty block"
    assert tuple(partial([0.0, -0.0, 0.0])) == (3, 0.0, 0.0), "a block of zeros"
    assert tuple(combine((3, 0.0, 0.0), (2, 0.0, 0.0))) == (5, 0.0, 0.0), "zeros with zeros: no division by zero"
    state_close(combine((3, 0.0, 0.0), (1, 2.0, 1.0)), (4, 2.0, 1.0), "zeros with a block")
    assert rms([0.0] * 7, block=3) == 0.0
    close(rms([0.0, 0.0, 0.0, 5.0], block=1), 2.5, "one number among zeros")


def test_huge_and_tiny_numbers():
    for row in ([1e200, -3e199, 2e200], [1e-200, 3e-200, -2e-200, 1e-201], [1e200, 1e-200, 0.0, -5e199],
                [1e308, 1e308, -1e308]):
        for block in (1, 2, 3, 4):
            close(rms(row, block), exact_rms(row), f"rms({row}, block={block})")


def test_every_block_size_gives_the_same_answer():
    rng = random.Random(19)
    row = [rng.uniform(-50, 50) for _ in range(37)]
    want = exact_rms(row)
    for block in range(1, 45):
        close(rms(row, block), want, f"37 numbers in blocks of {block}")


def test_combine_is_order_free():
    rng = random.Random(7)
    for _ in range(200):
        a = [rng.uniform(-10, 10) * 10 ** rng.randint(-5, 5) for _ in range(rng.randint(0, 6))]
        b = [rng.uniform(-10, 10) * 10 ** rng.randint(-5, 5) for _ in range(rng.randint(0, 6))]
        ab, ba, whole = combine(partial(a), partial(b)), combine(partial(b), partial(a)), partial(a + b)
        assert ab[0] == ba[0] == whole[0] == len(a) + len(b)
        for got in (ab, ba):
            scale, ssq = float(got[1]), float(got[2])
            if whole[1] == 0.0:
                assert scale == 0.0, f"zeros: got {got}"
                continue
            close(scale, whole[1], f"scale of {a} + {b}")
            close(ssq, whole[2], f"ssq of {a} + {b}")


def test_bad_input_is_refused():
    assert _raises([], 4), "empty row: ValueError expected"
    assert _raises([1.0], 0), "block 0: ValueError expected"
    assert _raises([1.0], -2), "negative block: ValueError expected"


def test_random_rows_match_exact_arithmetic():
    rng = random.Random(1919)
    for trial in range(300):
        n = rng.randint(1, 80)
        magnitude = 10.0 ** rng.choice([-200, -30, 0, 3, 30, 150, 200])
        row = [rng.gauss(0, 1) * magnitude * (10 ** rng.randint(-3, 3)) for _ in range(n)]
        if rng.random() < 0.2:
            row = [0.0 if rng.random() < 0.5 else x for x in row]
        block = rng.randint(1, n + 3)
        close(rms(row, block), exact_rms(row), f"trial {trial}: {n} numbers around {magnitude:g}, block {block}")
