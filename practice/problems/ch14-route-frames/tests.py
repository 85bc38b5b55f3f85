import random

from solution import route

EXAMPLES = ["test_statement_examples", "test_nothing_to_send"]


def test_statement_examples():
    assert route([("tokenize", 1), [("detokenize", 0), [("detokenize", 2)]]]) == \
        (("user", 1), [("reply", 0), ("reply", 2)], [])
    assert route([("ping", 3), ("abort", 4)]) == (("abort", 4), None, ["unknown message ping"])


def test_nothing_to_send():
    assert route([]) == (None, None, [])
    assert route([[], [[]]]) == (None, None, []), "empty batches carry nothing"


def test_one_message_is_not_wrapped_two_are():
    assert route([("error", 5)]) == (None, ("error_reply", 5), [])
    assert route([("error", 5), ("detokenize", 6)]) == (None, [("error_reply", 5), ("reply", 6)], [])


def test_order_is_kept_across_frames_and_nesting():
    frames = [[("tokenize", 1), [("abort", 2), [("tokenize", 3)]]], ("abort", 4), [[("tokenize", 5)]]]
    assert route(frames)[0] == [("user", 1), ("abort", 2), ("user", 3), ("abort", 4), ("user", 5)]


def test_every_unknown_message_is_reported_and_skipped():
    got = route([("tokenize", 1), [("status", 2), ("tokenize", 3)], ("bogus", 4)])
    assert got == ([("user", 1), ("user", 3)], None, ["unknown message status", "unknown message bogus"]), got


def _flat(frame):
    return [] if frame is None else frame if isinstance(frame, list) else [frame]


def test_random_frames():
    rng = random.Random(3)
    kinds = ["tokenize", "abort", "detokenize", "error", "odd"]
    names = {"tokenize": "user", "abort": "abort", "detokenize": "reply", "error": "error_reply"}
    for _ in range(500):
        sent = []

        def frame(depth):
            if depth < 3 and rng.random() < 0.3:
                return [frame(depth + 1) for _ in range(rng.randint(0, 3))]
            msg = (rng.choice(kinds), rng.randrange(100))
            sent.append(msg)
            return msg

        frames = [frame(0) for _ in range(rng.randint(0, 5))]
        sched, front, problems = route(frames)
        want_s = [(names[k], u) for k, u in sent if k in ("tokenize", "abort")]
        want_f = [(names[k], u) for k, u in sent if k in ("detokenize", "error")]
        assert _flat(sched) == want_s and _flat(front) == want_f, f"frames {frames}"
        for got, want in ((sched, want_s), (front, want_f)):
            assert (got is None) == (not want) and isinstance(got, list) == (len(want) > 1), \
                f"frames {frames}: one frame per destination: None, one message, or a list of several"
        assert problems == ["unknown message odd"] * sum(k == "odd" for k, _ in sent)
