from solution import acquire, token_slots

EXAMPLES = ["test_statement_example", "test_token_slots_example"]


def fresh(n: int) -> dict:
    return {"slots": [None] * n, "last_used": [0] * n, "clock": 0}


def test_statement_example():
    state = fresh(2)
    assert acquire(state, "a", set()) == 0 and acquire(state, "b", {"a"}) == 1, f"two empty slots: {state}"
    assert acquire(state, "a", {"a", "b"}) == 0, "a resident adapter keeps its slot"
    assert acquire(state, "c", {"a", "b"}) is None, "both adapters are live: the request waits"
    assert state["slots"] == ["a", "b"], f"a refused acquire changes no slot: {state['slots']}"
    assert acquire(state, "c", {"a"}) == 1, "b is not live any more: c takes its slot"
    assert state["clock"] == 5, f"one tick per call, refused ones too: clock {state['clock']}"


def test_token_slots_example():
    got = token_slots([("a", 3), (None, 1), ("b", 2)], {"a": 1, "b": 0})
    assert got == [1, 1, 1, -1, 0, 0], f"got {got}"


def test_least_recently_used_among_the_unused():
    state = fresh(3)
    for name in ("a", "b", "c"):
        acquire(state, name, set())
    acquire(state, "a", set())  # a is now the most recent; b the least
    assert acquire(state, "d", set()) == 1, f"b is the least recently used: {state}"
    assert acquire(state, "e", {"c"}) == 0, f"c is live, so a (older than d) goes: {state}"
    assert state["slots"] == ["e", "d", "c"], f"slots {state['slots']}"


def test_empty_slots_before_evicting():
    state = {"slots": ["x", None, None], "last_used": [1, 5, 3], "clock": 9}
    assert acquire(state, "y", set()) == 2, "an empty slot first (the one with the smaller last_used)"
    assert state["slots"] == ["x", None, "y"] and state["last_used"][2] == 10


def test_ties_take_the_lowest_index():
    state = {"slots": ["p", "q", "r"], "last_used": [4, 2, 2], "clock": 7}
    assert acquire(state, "s", set()) == 1, f"q and r were used at the same time: the lower index goes: {state}"


def test_none_when_every_slot_is_live_and_nothing_changes():
    state = {"slots": ["a", "b"], "last_used": [3, 4], "clock": 4}
    assert acquire(state, "z", {"a", "b", None}) is None
    assert state == {"slots": ["a", "b"], "last_used": [3, 4], "clock": 5}, f"only the clock moves: {state}"


def test_token_slots_refuse_bad_input():
    reqs, slot_of = [("a", 1)], {"a": 0}
    for bad_reqs, bad_map in (([("a", 0)], slot_of), ([("b", 2)], slot_of)):
        try:
            token_slots(bad_reqs, bad_map)
        except ValueError:
            pass
        else:
            raise AssertionError(f"expected ValueError for {bad_reqs} with {bad_map}")
    assert token_slots(reqs, slot_of) == [0] and reqs == [("a", 1)] and slot_of == {"a": 0}
