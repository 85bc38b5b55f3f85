import random

from solution import admit

EXAMPLES = ["test_statement_example", "test_page_rounding_per_request"]


def test_statement_example():
    got = admit([("a", 10, 0, 6), ("b", 20, 16, 5), ("c", 3, 0, 30), ("d", 1, 0, 1)],
                free_pages=4, page_size=8, free_slots=8)
    want = {"admitted": ["a", "b"], "waiting": ["c", "d"], "free_pages": 1}
    assert got == want, f"expected {want}, got {got}"


def test_page_rounding_per_request():
    got = admit([("x", 5, 0, 5), ("y", 5, 0, 5)], free_pages=3, page_size=8, free_slots=4)
    want = {"admitted": ["x"], "waiting": ["y"], "free_pages": 1}
    assert got == want, f"each 9-token request needs 2 pages of 8 (rounded up separately); got {got}"


def test_no_skipping_ahead():
    got = admit([("big", 40, 0, 24), ("small", 1, 0, 1)], free_pages=3, page_size=16, free_slots=4)
    want = {"admitted": [], "waiting": ["big", "small"], "free_pages": 3}
    assert got == want, (f"'big' needs 4 pages > 3 free, so admission stops there; 'small' (1 page) must not "
                         f"jump the queue; got {got}")


def test_reservation_includes_max_tokens():
    got = admit([("a", 4, 0, 14)], free_pages=4, page_size=4, free_slots=1)
    want = {"admitted": [], "waiting": ["a"], "free_pages": 4}
    assert got == want, f"4 prompt + 14 max_tokens - 1 = 17 tokens = 5 pages > 4; got {got}"
    got = admit([("a", 4, 0, 13)], free_pages=4, page_size=4, free_slots=1)
    want = {"admitted": ["a"], "waiting": [], "free_pages": 0}
    assert got == want, f"4 + 13 - 1 = 16 tokens are exactly 4 pages, which fit; got {got}"


def test_cached_prefix_is_not_reserved_again():
    got = admit([("a", 33, 32, 3)], free_pages=1, page_size=16, free_slots=1)
    want = {"admitted": ["a"], "waiting": [], "free_pages": 0}
    assert got == want, f"only 33 - 32 + 3 - 1 = 3 tokens need pages: 1 page of 16; got {got}"


def test_slots_limit_admission():
    got = admit([("a", 1, 0, 1), ("b", 1, 0, 1), ("c", 1, 0, 1)], free_pages=100, page_size=1, free_slots=2)
    want = {"admitted": ["a", "b"], "waiting": ["c"], "free_pages": 98}
    assert got == want, f"two free slots admit two requests; got {got}"
    got = admit([("a", 1, 0, 1)], free_pages=100, page_size=1, free_slots=0)
    assert got == {"admitted": [], "waiting": ["a"], "free_pages": 100}, f"no free slot, nothing admitted; got {got}"


def test_empty_queue():
    got = admit([], free_pages=7, page_size=4, free_slots=3)
    assert got == {"admitted": [], "waiting": [], "free_pages": 7}, f"empty queue; got {got}"


def test_invalid_requests():
    for req in (("a", 10, 3, 1), ("a", 10, 10, 1), ("a", 10, -4, 1), ("a", 10, 0, 0)):
        try:
            admit([req], free_pages=10, page_size=4, free_slots=1)
        except ValueError:
            continue
        raise AssertionError(f"admit([{req}], page_size=4) should raise ValueError")


def test_random_queues_against_the_rules():
    rng = random.Random(8)
    for _ in range(300):
        page = rng.choice([1, 2, 4, 16])
        waiting = []
        for i in range(rng.randint(0, 8)):
            cached = page * rng.randint(0, 3)
            waiting.append((f"r{i}", cached + rng.randint(1, 40), cached, rng.randint(1, 40)))
        free, slots = rng.randint(0, 40), rng.randint(0, 9)
        got = admit(list(waiting), free, page, slots)
        ctx = f"admit({waiting}, free_pages={free}, page_size={page}, free_slots={slots})"
        n = len(got["admitted"])
        assert got["admitted"] + got["waiting"] == [w[0] for w in waiting], f"{ctx}: order must be kept, got {got}"
        # count the pages token by token: a new page starts at every multiple of page_size
        needs = [sum(1 for t in range(pl - c + m - 1) if t % page == 0) for _, pl, c, m in waiting]
        assert n <= slots and sum(needs[:n]) <= free, f"{ctx}: admitted more than fits, got {got}"
        assert got["free_pages"] == free - sum(needs[:n]), f"{ctx}: wrong free_pages, got {got}"
        if n < len(waiting):
            assert n == slots or sum(needs[:n + 1]) > free, f"{ctx}: {waiting[n][0]} also fits, got {got}"
