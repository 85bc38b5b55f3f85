import random

from solution import make_room

EXAMPLES = ["test_statement_example", "test_pinned_requests_are_skipped"]
RUNNING = [("a", 10, 3), ("b", 7, 2), ("c", 20, 1), ("d", 6, 1)]


def test_statement_example():
    got = make_room(RUNNING, available=1, page_size=4, policy="length", pinned=set())
    want = {"retract": ["c"], "keep": ["a", "b", "d"], "fits": True}
    assert got == want, f"expected {want}, got {got}"


def test_pinned_requests_are_skipped():
    got = make_room(RUNNING, available=1, page_size=4, policy="length", pinned={"c"})
    want = {"retract": ["d"], "keep": ["a", "b", "c"], "fits": True}
    assert got == want, f"c is pinned: d (1 generated) goes instead; expected {want}, got {got}"


def test_last_admitted_first():
    got = make_room(RUNNING, available=1, page_size=4, policy="last", pinned=set())
    want = {"retract": ["d"], "keep": ["a", "b", "c"], "fits": True}
    assert got == want, f"'last' retracts d, the latest admitted; expected {want}, got {got}"
    got = make_room(RUNNING, available=0, page_size=4, policy="last", pinned={"d"})
    want = {"retract": ["c"], "keep": ["a", "b", "d"], "fits": True}
    assert got == want, f"d pinned: c; its 5 pages cover the 2 new pages of a and b; expected {want}, got {got}"


def test_nothing_to_do_when_it_fits():
    got = make_room(RUNNING, available=3, page_size=4, policy="length", pinned=set())
    assert got == {"retract": [], "keep": ["a", "b", "c", "d"], "fits": True}, f"3 pages needed, 3 free; got {got}"


def test_ties_go_to_the_latest_admitted():
    running = [("x", 8, 2), ("y", 8, 2), ("z", 8, 2)]
    got = make_room(running, available=0, page_size=1, policy="length", pinned=set())
    assert got["retract"] == ["z"], f"equal generated and prompts: the latest admitted first; got {got}"


def test_several_victims_in_order():
    running = [("a", 4, 1), ("b", 4, 1), ("c", 4, 1), ("d", 4, 1)]  # page 1: 4 new pages, each holds 4
    got = make_room(running, available=0, page_size=1, policy="last", pinned=set())
    want = {"retract": ["d"], "keep": ["a", "b", "c"], "fits": True}
    assert got == want, f"d gives back 4 pages, the 3 others need 3; got {got}"
    running = [("a", 1, 1), ("b", 1, 1), ("c", 1, 1), ("d", 1, 1)]  # each holds 1 page and needs 1
    got = make_room(running, available=0, page_size=1, policy="last", pinned=set())
    want = {"retract": ["d", "c"], "keep": ["a", "b"], "fits": True}
    assert got == want, f"each victim frees 1 page: two victims for 2 rows; got {got}"


def test_the_last_row_stays():
    got = make_room([("a", 8, 1)], available=0, page_size=8, policy="length", pinned=set())
    want = {"retract": [], "keep": ["a"], "fits": False}
    assert got == want, f"a alone, no page: it is not retracted, the step does not fit; got {got}"


def test_everyone_pinned():
    got = make_room(RUNNING, available=0, page_size=4, policy="length", pinned={"a", "b", "c", "d"})
    want = {"retract": [], "keep": ["a", "b", "c", "d"], "fits": False}
    assert got == want, f"no request may be retracted: the step waits; got {got}"


def test_invalid_arguments():
    for args in ((RUNNING, 1, 4, "first", set()), (RUNNING, 1, 0, "length", set()),
                 ([("a", 0, 1)], 1, 4, "length", set()), ([("a", 3, 0)], 1, 4, "length", set())):
        try:
            make_room(*args)
        except ValueError:
            continue
        raise AssertionError(f"make_room{args} should raise ValueError")


def needs(keep, page):
    return sum(1 for _, p, g in keep if (p + g - 1) % page == 0)


def test_random_steps_against_the_rules():
    rng = random.Random(23)
    for _ in range(400):
        page = rng.choice([1, 2, 4, 16])
        running = [(f"r{i}", rng.randint(1, 40), rng.randint(1, 40)) for i in range(rng.randint(1, 7))]
        pinned = {u for u, _, _ in running if rng.random() < 0.3}
        policy = rng.choice(["length", "last"])
        available = rng.randint(0, 3)
        got = make_room(list(running), available, page, policy, set(pinned))
        ctx = f"make_room({running}, {available}, {page}, {policy!r}, {pinned})"
        order = [u for u, _, _ in running]
        assert sorted(got["retract"] + got["keep"]) == sorted(order), f"{ctx}: every request retracted or kept: {got}"
        assert got["keep"] == [u for u in order if u in got["keep"]], f"{ctx}: the kept requests keep their order"
        assert not set(got["retract"]) & pinned, f"{ctx}: a pinned request was retracted: {got}"
        assert got["keep"], f"{ctx}: the last request is never retracted: {got}"
        keep = [r for r in running if r[0] in got["keep"]]
        freed = sum(-(-(p + g - 1) // page) for u, p, g in running if u in got["retract"])
        assert got["fits"] == (needs(keep, page) <= available + freed), f"{ctx}: 'fits' is wrong: {got}"
        # no victim too many: before the last retraction, the step did not fit
        if got["retract"]:
            last = got["retract"][-1]
            before = [r for r in running if r[0] in got["keep"] or r[0] == last]
            freed_before = freed - next(-(-(p + g - 1) // page) for u, p, g in running if u == last)
            assert needs(before, page) > available + freed_before, f"{ctx}: {last} was retracted but not needed: {got}"
        if not got["fits"]:
            assert len(got["keep"]) == 1 or set(got["keep"]) <= pinned, \
                f"{ctx}: it does not fit, yet an unpinned request could still go: {got}"
