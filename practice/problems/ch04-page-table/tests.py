import random

from solution import PageTable

EXAMPLES = ["test_statement_example", "test_two_requests_interleaved"]


def _raises(fn, *args):
    """True if fn(*args) raises ValueError, False if it returns; any other exception is a failure."""
    try:
        fn(*args)
    except ValueError:
        return True
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"{fn.__name__}({', '.join(map(repr, args))}) raised {type(e).__name__}: {e}; expected ValueError") from e
    return False


def test_statement_example():
    t = PageTable(2, 8)
    t.write(1, 0, [7, 3, 12])
    t.write(1, 3, [5])
    assert t.read(1, 4) == [7, 3, 12, 5], t.read(1, 4)
    assert t.read(1, 2) == [7, 3], "read(row, length) returns only the first `length` slots"
    try:
        t.read(0, 1)
    except ValueError:
        pass
    else:
        raise AssertionError("row 0 was never written: read(0, 1) must raise ValueError")


def test_two_requests_interleaved():
    t = PageTable(2, 6)
    t.write(0, 0, [4, 9])        # prefill of request in row 0
    t.write(1, 0, [0, 1, 2])     # prefill of request in row 1
    t.write(0, 2, [3])           # decode step: one token each
    t.write(1, 3, [8])
    assert t.read(0, 3) == [4, 9, 3], f"row 0: got {t.read(0, 3)}"
    assert t.read(1, 4) == [0, 1, 2, 8], f"row 1: got {t.read(1, 4)}"


def test_rows_are_independent_and_clear_resets():
    t = PageTable(3, 4)
    t.write(0, 0, [1, 2])
    t.write(2, 0, [9, 8, 7, 6])
    assert t.read(0, 2) == [1, 2] and t.read(2, 4) == [9, 8, 7, 6]
    assert _raises(t.read, 1, 1), "row 1 was never written: reading position 0 must raise ValueError"
    t.clear(2)
    assert _raises(t.read, 2, 1), "after clear(2) the row is unmapped again"
    assert t.read(2, 0) == [], "reading zero positions is fine even on an empty row"
    assert t.read(0, 2) == [1, 2], "clear must touch only its own row"


def test_read_returns_a_copy():
    t = PageTable(1, 3)
    t.write(0, 0, [4, 5, 6])
    got = t.read(0, 3)
    got[0] = 99
    assert t.read(0, 3) == [4, 5, 6], "changing the returned list must not change the table"


def test_bad_arguments_are_refused():
    t = PageTable(2, 4)
    assert _raises(t.write, 2, 0, [1]), "row 2 does not exist (max_reqs=2)"
    assert _raises(t.write, -1, 0, [1]), "row -1 does not exist"
    assert _raises(t.write, 0, -1, [1]), "start < 0"
    assert _raises(t.write, 0, 2, [1, 2, 3]), "positions 2..4 run past max_seq_len=4"
    t.write(0, 2, [1, 2])  # positions 2..3 fit exactly
    assert _raises(t.read, 0, 4), "positions 0 and 1 are still unmapped"
    assert _raises(t.read, 0, 5), "length 5 > max_seq_len"
    assert _raises(t.read, 5, 1), "row 5 does not exist"


def test_hole_in_the_middle_is_detected():
    t = PageTable(1, 6)
    t.write(0, 0, [10, 11])
    t.write(0, 3, [13])
    assert _raises(t.read, 0, 4), "position 2 was skipped: reading 4 positions must raise"


def test_random_extends_against_a_model():
    rng = random.Random(11)
    max_reqs, max_len = 5, 40
    t = PageTable(max_reqs, max_len)
    lengths = [0] * max_reqs
    model = [[] for _ in range(max_reqs)]
    next_slot = iter(rng.sample(range(10_000), 10_000))
    for step in range(500):
        row = rng.randrange(max_reqs)
        if rng.random() < 0.1:
            t.clear(row)
            lengths[row], model[row] = 0, []
            continue
        n = rng.randint(1, 6)
        if lengths[row] + n > max_len:
            assert _raises(t.write, row, lengths[row], [0] * n), f"step {step}: {n} slots from position {lengths[row]} run past max_seq_len {max_len}: ValueError expected"
            continue
        new = [next(next_slot) for _ in range(n)]
        t.write(row, lengths[row], new)
        lengths[row] += n
        model[row] += new
        assert t.read(row, lengths[row]) == model[row], f"step {step}: row {row}"
