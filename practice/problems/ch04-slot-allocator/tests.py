import random

from solution import SlotAllocator

EXAMPLES = ["test_statement_example", "test_all_or_nothing_allocate"]


def _raises(exc, fn, *args):
    """True if fn(*args) raises exc, False if it returns; any other exception is reported as a failure."""
    try:
        fn(*args)
    except exc:
        return True
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"{fn.__name__}({', '.join(map(repr, args))}) raised {type(e).__name__}: {e}; expected {exc.__name__}") from e
    return False


def test_statement_example():
    a = SlotAllocator(4)
    s = a.allocate(3)
    assert len(s) == 3 and len(set(s)) == 3 and all(0 <= x < 4 for x in s), f"3 distinct slots in range: {s}"
    assert _raises(MemoryError, a.allocate, 2), "only 1 slot is free: allocate(2) must raise MemoryError"
    assert a.available == 1, f"a failed allocate must change nothing: available is {a.available}"
    a.free([s[0]])
    assert a.available == 2
    assert _raises(ValueError, a.free, [s[0]]), "freeing a free slot again must raise ValueError"


def test_all_or_nothing_allocate():
    a = SlotAllocator(5)
    assert _raises(MemoryError, a.allocate, 6), "6 slots asked of 5: MemoryError"
    assert a.available == 5
    got = a.allocate(5)
    assert sorted(got) == [0, 1, 2, 3, 4], f"all five slots: {got}"
    assert a.available == 0
    assert a.allocate(0) == [], "allocate(0) returns an empty list, even when nothing is free"


def test_negative_request_is_refused():
    a = SlotAllocator(3)
    assert _raises(ValueError, a.allocate, -1), "allocate(-1) must raise ValueError"
    assert a.available == 3


def test_all_or_nothing_free():
    a = SlotAllocator(6)
    s = a.allocate(4)
    never = [x for x in range(6) if x not in s][0]
    for bad in ([s[0], s[1], never], [s[0], s[0]], [s[2], 6], [s[3], -1]):
        assert _raises(ValueError, a.free, bad), f"free({bad}) must raise ValueError (allocated: {s})"
        assert a.available == 2, f"free({bad}) failed but changed the free count to {a.available}"
    a.free(s)
    assert a.available == 6, "after the failed calls, freeing every allocated slot once must work"


def test_freed_slots_are_reused():
    a = SlotAllocator(3)
    first = a.allocate(3)
    a.free([first[1]])
    assert a.allocate(1) == [first[1]], "the only free slot is the one just freed"


def test_random_operations_against_a_model():
    rng = random.Random(7)
    n = 200
    a = SlotAllocator(n)
    held = set()
    for step in range(3000):
        if rng.random() < 0.55:
            k = rng.randint(0, 12)
            if k > n - len(held):
                assert _raises(MemoryError, a.allocate, k), f"step {step}: {k} > free {n - len(held)}"
            else:
                got = a.allocate(k)
                assert len(got) == k and len(set(got)) == k, f"step {step}: {k} distinct slots, got {got}"
                assert not (set(got) & held), f"step {step}: handed out slots already in use: {set(got) & held}"
                assert all(0 <= x < n for x in got), f"step {step}: slot out of range in {got}"
                held.update(got)
        elif held:
            chosen = rng.sample(sorted(held), rng.randint(1, min(8, len(held))))
            if rng.random() < 0.2:
                chosen.append(rng.choice([-3, n, n + 5, chosen[0]] + [x for x in range(n) if x not in held][:1]))
                assert _raises(ValueError, a.free, chosen), f"step {step}: free({chosen}) must be refused"
            else:
                a.free(chosen)
                held.difference_update(chosen)
        assert a.available == n - len(held), f"step {step}: available {a.available}, expected {n - len(held)}"


def test_large_pool_is_fast():
    a = SlotAllocator(200_000)
    chunks = [a.allocate(100) for _ in range(1000)]
    for c in chunks:
        a.free(c)
    assert a.available == 200_000
