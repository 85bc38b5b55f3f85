import random

from solution import pages_for, pages_to_allocate, release

EXAMPLES = ["test_statement_examples"]


def test_statement_examples():
    assert pages_for(9, 4) == 3, f"pages_for(9, 4): 4 + 4 + 1 tokens = 3 pages, got {pages_for(9, 4)}"
    got = pages_to_allocate(9, 3, 4)
    assert got == 0, f"pages_to_allocate(9, 3, 4): tokens 9..11 fit in the third page, got {got}"
    got = pages_to_allocate(12, 1, 4)
    assert got == 1, f"pages_to_allocate(12, 1, 4): token 12 opens a fourth page, got {got}"
    assert release(13, 4, True) == (3, 1), f"release(13, 4, True): got {release(13, 4, True)}"
    assert release(13, 4, False) == (0, 4), f"release(13, 4, False): got {release(13, 4, False)}"


def test_exact_multiples_and_zero():
    assert pages_for(8, 4) == 2, f"8 tokens fill exactly 2 pages, got {pages_for(8, 4)}"
    assert pages_for(0, 4) == 0, f"an empty sequence holds no page, got {pages_for(0, 4)}"
    assert pages_to_allocate(0, 1, 16) == 1, "the first token of a sequence needs a page"
    assert pages_to_allocate(5, 0, 4) == 0, "growing by nothing allocates nothing"
    assert release(8, 4, True) == (2, 0), f"a page-aligned sequence is kept whole, got {release(8, 4, True)}"
    assert release(0, 4, True) == (0, 0), f"nothing to release, got {release(0, 4, True)}"


def test_page_size_one_is_token_granular():
    assert pages_for(7, 1) == 7
    assert pages_to_allocate(7, 5, 1) == 5, "page size 1: one page per new token"
    assert release(7, 1, True) == (7, 0), "page size 1: every page is full, nothing is freed"


def test_big_extend_across_several_pages():
    got = pages_to_allocate(3, 30, 8)
    assert got == 4, f"3 -> 33 tokens: 1 page -> 5 pages, so 4 new; got {got}"


def test_decode_allocates_once_every_page_size_steps():
    allocs = [pages_to_allocate(n, 1, 4) for n in range(10, 22)]
    assert allocs == [0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0], f"decode from length 10, page 4: got {allocs}"


def test_invalid_arguments():
    calls = [lambda: pages_for(-1, 4), lambda: pages_for(3, 0), lambda: pages_to_allocate(2, -1, 4),
             lambda: pages_to_allocate(-2, 3, 4), lambda: release(-1, 4, True), lambda: release(3, 0, False)]
    for i, call in enumerate(calls):
        try:
            call()
        except ValueError:
            continue
        raise AssertionError(f"invalid call #{i} should raise ValueError")


def test_random_growth_against_slot_by_slot_simulation():
    rng = random.Random(88)
    for _ in range(200):
        page = rng.choice([1, 2, 3, 4, 16, 64])
        owned, length = 0, 0  # simulate: a token needs a new page when every owned slot is used
        for _ in range(rng.randint(1, 12)):
            extend = rng.choice([1, 1, 1, rng.randint(0, 100)])
            new = 0
            for _ in range(extend):
                if length == owned * page:
                    owned, new = owned + 1, new + 1
                length += 1
            got = pages_to_allocate(length - extend, extend, page)
            assert got == new, f"pages_to_allocate({length - extend}, {extend}, {page}): expected {new}, got {got}"
            assert pages_for(length, page) == owned, f"pages_for({length}, {page}): expected {owned}"
        kept, freed = release(length, page, True)
        full = sum(1 for p in range(owned) if (p + 1) * page <= length)
        assert (kept, freed) == (full, owned - full), f"release({length}, {page}, True): expected {(full, owned - full)}"
        assert release(length, page, False) == (0, owned), f"release({length}, {page}, False): expected (0, {owned})"
