from solution import demote

EXAMPLES = ["test_statement_example", "test_write_through_drops_what_it_could_not_back_up"]


def test_statement_example():
    leaves = [("a", 16, 5, False), ("b", 32, 2, False), ("c", 16, 9, True)]
    got = demote(leaves, 40, "write_back", 40)
    want = {"evicted": [("b", "host"), ("a", "dropped")], "freed": 48, "host_free": 8}
    assert got == want, f"b (least recent) is copied, then a no longer fits the host's 8 tokens: expected {want}, got {got}"


def test_write_through_drops_what_it_could_not_back_up():
    leaves = [("a", 8, 1, True), ("b", 8, 2, False), ("c", 8, 3, True)]
    got = demote(leaves, 24, "write_through", 100)
    assert got["evicted"] == [("a", "host"), ("b", "dropped"), ("c", "host")] and got["host_free"] == 100, \
        f"write-through copies nothing at eviction, however much host room there is: {got}"


def test_stops_once_enough_is_freed():
    leaves = [("a", 8, 1, True), ("b", 8, 2, True), ("c", 8, 3, True)]
    got = demote(leaves, 9, "write_through", 0)
    assert got == {"evicted": [("a", "host"), ("b", "host")], "freed": 16, "host_free": 0}, got
    assert demote(leaves, 0, "write_back", 5) == {"evicted": [], "freed": 0, "host_free": 5}


def test_equal_times_keep_the_given_order():
    leaves = [("x", 4, 7, False), ("y", 4, 7, False), ("z", 4, 1, False)]
    got = demote(leaves, 12, "write_back", 8)
    assert got["evicted"] == [("z", "host"), ("x", "host"), ("y", "dropped")], got


def test_write_back_keeps_an_already_backed_up_leaf_without_a_new_copy():
    got = demote([("a", 16, 1, True), ("b", 16, 2, False)], 32, "write_back", 16)
    assert got == {"evicted": [("a", "host"), ("b", "host")], "freed": 32, "host_free": 0}, \
        f"a's copy exists: only b takes host room: {got}"


def test_errors():
    for args in (([("a", 4, 1, True)], 5, "write_through", 0), ([("a", 4, 1, True)], 1, "write_around", 0)):
        try:
            demote(*args)
        except ValueError:
            continue
        raise AssertionError(f"demote{args} must raise ValueError")


def test_inputs_are_not_changed():
    leaves = [("a", 4, 2, False), ("b", 4, 1, False)]
    copy = list(leaves)
    demote(leaves, 8, "write_back", 4)
    assert leaves == copy, "the leaves list is the caller's"
