import random

from solution import route

EXAMPLES = ["test_statement_examples", "test_late_tokens_and_aborts_are_ignored"]


def _oracle(messages):
    """Request by request: find where each stream ends, then merge the replies back in message order."""
    replies, aborts = [], []  # (position, ...) to sort by
    opened = {m[1]: (i, set(m[2])) for i, m in enumerate(messages) if m[0] == "open"}
    for uid, (start, stop_ids) in opened.items():
        count = 0
        for i in range(start + 1, len(messages)):
            m = messages[i]
            if m[1] != uid:
                continue
            if m[0] == "abort":
                replies.append((i, (uid, None, "abort", count)))
                aborts.append((i, uid))
                break
            if m[0] == "token":
                count += 1
                if m[2] in stop_ids:
                    replies.append((i, (uid, None, "stop", count)))
                    if m[3] is None:
                        aborts.append((i, uid))
                    break
                replies.append((i, (uid, m[2], m[3], count)))
                if m[3] is not None:
                    break
    return [u for _, u in sorted(aborts)], [r for _, r in sorted(replies)]


def test_statement_examples():
    assert route([("open", 1, [0]), ("token", 1, 5, None), ("token", 1, 0, None), ("token", 1, 7, None)]) == \
        ([1], [(1, 5, None, 1), (1, None, "stop", 2)])
    assert route([("open", 2, []), ("token", 2, 9, "length"), ("abort", 2)]) == ([], [(2, 9, "length", 1)])


def test_late_tokens_and_aborts_are_ignored():
    got = route([("open", 3, []), ("token", 3, 4, None), ("abort", 3), ("token", 3, 5, None), ("abort", 3),
                 ("token", 9, 1, None), ("abort", 9)])
    assert got == ([3], [(3, 4, None, 1), (3, None, "abort", 1)]), got


def test_a_stop_token_the_scheduler_also_finished_on_needs_no_abort():
    got = route([("open", 4, [2]), ("token", 4, 2, "stop")])
    assert got == ([], [(4, None, "stop", 1)]), "EOS among the stop ids: the scheduler already knows"


def test_abort_before_any_token():
    assert route([("open", 5, []), ("abort", 5), ("token", 5, 8, None)]) == ([5], [(5, None, "abort", 0)])


def test_streams_are_kept_apart():
    got = route([("open", 1, [7]), ("open", 2, [7]), ("token", 1, 3, None), ("token", 2, 7, None),
                 ("token", 1, 7, "length"), ("token", 2, 4, None)])
    assert got == ([2], [(1, 3, None, 1), (2, None, "stop", 1), (1, None, "stop", 2)]), got


def test_random_traffic_matches_a_request_by_request_oracle():
    rng = random.Random(14)
    for _ in range(1500):
        uids = list(range(rng.randint(1, 4)))
        msgs, opened = [], []
        for _ in range(rng.randint(0, 25)):
            if uids and (not opened or rng.random() < 0.15):
                uid = uids.pop(0)
                opened.append(uid)
                msgs.append(("open", uid, rng.sample(range(6), rng.randint(0, 2))))
                continue
            uid = rng.choice(opened + [99])
            if rng.random() < 0.15:
                msgs.append(("abort", uid))
            else:
                msgs.append(("token", uid, rng.randrange(6), rng.choice([None, None, None, "stop", "length"])))
        want = _oracle(msgs)
        assert route(msgs) == want, f"messages {msgs}:\n got {route(msgs)}\nwant {want}"
