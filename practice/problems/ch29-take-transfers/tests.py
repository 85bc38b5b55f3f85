from solution import take_transfers

EXAMPLES = ["test_statement_example", "test_the_head_of_the_channel_blocks_the_rest"]


def test_statement_example():
    posted = [(7, "kv"), (8, "aborted"), (9, "kv"), (4, "kv"), (5, "kv")]
    got = take_transfers(posted, {7: 20, 8: 10, 4: 30, 5: 8}, {9}, 40)
    want = {"started": [7], "discarded": [9], "ended": [8], "next": 3, "free": 20}
    assert got == want, f"expected {want} (see the statement), got {got}"


def test_the_head_of_the_channel_blocks_the_rest():
    got = take_transfers([(1, "kv"), (2, "kv")], {2: 5}, set(), 100)
    assert got["next"] == 0 and got["started"] == [], \
        f"room 1 has not arrived: its KV heads the channel, and room 2 behind it waits too: {got}"
    got = take_transfers([(1, "kv"), (2, "kv")], {1: 60, 2: 5}, set(), 50)
    assert got["next"] == 0 and got["free"] == 50, f"room 1 needs 60 of 50 free slots: nothing is taken: {got}"


def test_exact_fit_is_taken():
    got = take_transfers([(1, "kv"), (2, "kv")], {1: 30, 2: 20}, set(), 50)
    assert got == {"started": [1, 2], "discarded": [], "ended": [], "next": 2, "free": 0}, got


def test_an_abort_for_a_room_not_here_ends_nothing():
    got = take_transfers([(3, "aborted"), (1, "kv")], {1: 4}, set(), 10)
    assert got == {"started": [1], "discarded": [], "ended": [], "next": 2, "free": 6}, \
        f"an aborted transfer is taken even when its request never came: {got}"


def test_dropped_rooms_cost_no_slots_and_are_dropped_once():
    got = take_transfers([(5, "kv"), (6, "kv")], {6: 10}, {5}, 10)
    assert got == {"started": [6], "discarded": [5], "ended": [], "next": 2, "free": 0}, got
    got = take_transfers([(5, "aborted")], {}, {5}, 0)
    assert got["discarded"] == [] and got["next"] == 1, f"an abort from the prefill side: no KV to drop: {got}"


def test_inputs_are_not_changed():
    waiting, dropped = {1: 4, 2: 4}, {3}
    take_transfers([(1, "kv"), (3, "kv")], waiting, dropped, 10)
    assert waiting == {1: 4, 2: 4} and dropped == {3}, "take_transfers changed its arguments"


def test_bad_input():
    for args in (([(1, "kv")], {1: 1}, set(), -1), ([(1, "kv")], {1: -2}, set(), 5), ([(1, "maybe")], {}, set(), 5)):
        try:
            take_transfers(*args)
        except ValueError:
            continue
        raise AssertionError(f"expected ValueError for {args}")
