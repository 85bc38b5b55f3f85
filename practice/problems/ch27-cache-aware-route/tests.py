import random

from solution import route

EXAMPLES = ["test_statement_example", "test_a_short_match_is_no_hit"]


def send(*texts):
    return [("send", t) for t in texts]


def test_statement_example():
    events = send("You are helpful. Hi", "You are terse. Yo", "You are helpful. Hi! And you?") + [("finish", 0)] \
        + send("You are terse. Yo, again")
    got = route(events, 2, abs_threshold=0)
    assert got == [0, 1, 0, 1], f"expected [0, 1, 0, 1] (see the statement), got {got}"


def test_a_short_match_is_no_hit():
    got = route(send("abc", "abcdefghij", "abcdefghij"), 2, abs_threshold=100)
    assert got == [0, 1, 1], \
        f"3 of 10 characters is not more than 0.3: the least loaded (worker 1); then a full match there: {got}"
    got = route(send("abc", "xyz", "abcdefghij"), 2)
    assert got == [0, 1, 0], f"'xyz' matches nothing: worker 1; then no hit, loads equal: the first, worker 0: {got}"
    got = route(send(""), 3)
    assert got == [0], f"an empty text matches nothing: {got}"


def test_equal_matches_go_to_the_worker_that_had_the_text_first():
    events = send("system A: q1", "system A: q2") + [("finish", 0), ("finish", 1)] + send("system A: q3")
    got = route(events, 2, abs_threshold=0, rel_threshold=1.0)
    # request 1: loads [1, 0] are imbalanced (abs 0, rel 1): worker 1. Request 2: both match "system A: q" (11
    # characters); worker 0 had it first (request 0).
    assert got == [0, 1, 0], f"expected [0, 1, 0], got {got}"


def test_imbalance_needs_both_thresholds():
    events = send(*["same prefix " + str(i) for i in range(6)])
    assert route(events, 2, abs_threshold=64) == [0] * 6, "balanced: every request follows the shared prefix"
    got = route(events, 2, abs_threshold=1, rel_threshold=1.5)
    assert got == [0, 0, 1, 0, 1, 0], f"abs 1, rel 1.5: each time worker 0 leads by 2, worker 1 takes one: {got}"
    got = route(events, 2, abs_threshold=1, rel_threshold=3.0)
    assert got == [0, 0, 1, 0, 0, 1], f"abs 1, rel 3: loads 3 vs 1 are balanced (3 is not above 1 x 3): {got}"


def oracle(events, workers, threshold, abs_t, rel_t):
    sent, loads, chosen = [], [0] * workers, []
    for kind, arg in events:
        if kind == "finish":
            loads[chosen[arg]] -= 1
            continue
        if max(loads) - min(loads) > abs_t and max(loads) > min(loads) * rel_t:
            pick = loads.index(min(loads))
        else:
            def lcp(a, b):
                return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            scored = [(lcp(arg, t), -i, w) for i, (t, w) in enumerate(sent)]
            m = max((s[0] for s in scored), default=0)
            if arg and m / len(arg) > threshold:
                pick = max(s for s in scored if s[0] == m)[2]
            else:
                pick = loads.index(min(loads))
        sent.append((arg, pick))
        loads[pick] += 1
        chosen.append(pick)
    return chosen


def test_random_traces_against_brute_force():
    rng = random.Random(0)
    for case in range(150):
        workers = rng.randint(1, 4)
        events, inflight, count = [], [], 0
        for _ in range(rng.randint(1, 25)):
            text = "".join(rng.choice("ab") for _ in range(rng.randint(0, 10)))
            events.append(("send", text))
            inflight.append(count)
            count += 1
            while inflight and rng.random() < 0.4:
                events.append(("finish", inflight.pop(rng.randrange(len(inflight)))))
        threshold, abs_t, rel_t = rng.choice([0.0, 0.3, 0.5]), rng.choice([0, 1, 2, 64]), rng.choice([1.0, 1.5])
        want = oracle(events, workers, threshold, abs_t, rel_t)
        got = route(events, workers, threshold, abs_t, rel_t)
        assert got == want, (f"case {case}: {workers} workers, threshold {threshold}, abs {abs_t}, rel {rel_t}, "
                             f"events {events}: expected {want}, got {got}")
