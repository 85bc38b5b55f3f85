import math
import random

from solution import request_metrics, summary

EXAMPLES = ["test_statement_example_per_request", "test_statement_example_summary"]

EVENTS = [(0.0, "a", "arrive"), (0.5, "a", "token"), (0.7, "a", "token"), (0.9, "a", "token"),
          (0.2, "b", "arrive"), (1.2, "b", "token")]


def close(x, y):
    if x is None or y is None:
        return x is None and y is None
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)


def same(got: dict, want: dict) -> bool:
    return set(got) == set(want) and all(close(got[k], want[k]) for k in want)


def test_statement_example_per_request():
    got = request_metrics(EVENTS)
    assert set(got) == {"a", "b"}, f"one entry per uid, got keys {sorted(got)}"
    want_a = {"tokens": 3, "ttft": 0.5, "tpot": 0.2, "latency": 0.9}
    want_b = {"tokens": 1, "ttft": 1.0, "tpot": None, "latency": 1.0}
    assert same(got["a"], want_a), f"a: expected {want_a}, got {got['a']}"
    assert same(got["b"], want_b), f"b: one token, so no TPOT; expected {want_b}, got {got['b']}"


def test_statement_example_summary():
    want = {"mean_ttft": 0.75, "mean_tpot": 0.2, "throughput": 4 / 1.2}
    got = summary(EVENTS)
    assert same(got, want), f"expected {want}, got {got}"


def test_events_in_any_order():
    shuffled = list(EVENTS)
    random.Random(3).shuffle(shuffled)
    assert request_metrics(shuffled) == request_metrics(EVENTS), "the order of the events must not matter"
    got = request_metrics([(3.0, "x", "token"), (1.0, "x", "token"), (0.0, "x", "arrive"), (2.0, "x", "token")])
    want = {"tokens": 3, "ttft": 1.0, "tpot": 1.0, "latency": 3.0}
    assert same(got["x"], want), f"tokens listed out of time order; expected {want}, got {got['x']}"


def test_request_without_tokens():
    events = [(0.0, "a", "arrive"), (1.0, "a", "token"), (2.0, "a", "token"), (0.5, "w", "arrive")]
    got = request_metrics(events)
    want = {"tokens": 0, "ttft": None, "tpot": None, "latency": None}
    assert same(got["w"], want), f"a request still waiting has no metrics yet; expected {want}, got {got['w']}"
    s = summary(events)
    assert same(s, {"mean_ttft": 1.0, "mean_tpot": 1.0, "throughput": 1.0}), (
        f"the waiting request is left out of the means (but its arrival counts for the span); got {s}")


def test_summary_with_nothing_emitted():
    s = summary([(0.0, "a", "arrive")])
    assert s == {"mean_ttft": None, "mean_tpot": None, "throughput": None}, f"no tokens at all; got {s}"
    assert summary([]) == {"mean_ttft": None, "mean_tpot": None, "throughput": None}, "empty trace"
    assert request_metrics([]) == {}, "empty trace: no requests"


def test_invalid_traces():
    bad_traces = [
        [(1.0, "a", "token")],                                  # never arrived
        [(1.0, "a", "arrive"), (0.5, "a", "token")],            # token before arrival
        [(0.0, "a", "arrive"), (1.0, "a", "arrive")],           # arrives twice
    ]
    for events in bad_traces:
        try:
            request_metrics(events)
        except ValueError:
            continue
        raise AssertionError(f"request_metrics({events}) should raise ValueError")


def test_random_traces_against_a_step_clock():
    # build traces from a known schedule: request i arrives at a_i, waits w_i, then emits n_i tokens
    # every d_i seconds, so TTFT = w_i and TPOT = d_i by construction
    rng = random.Random(77)
    for _ in range(100):
        plan = {f"r{i}": (rng.randint(0, 20) / 4, rng.randint(1, 12) / 4, rng.randint(1, 6), rng.randint(1, 8) / 8)
                for i in range(rng.randint(1, 6))}
        events = []
        for uid, (a, w, n, d) in plan.items():
            events.append((a, uid, "arrive"))
            events += [(a + w + k * d, uid, "token") for k in range(n)]
        rng.shuffle(events)
        got = request_metrics(events)
        for uid, (a, w, n, d) in plan.items():
            want = {"tokens": n, "ttft": w, "tpot": d if n > 1 else None, "latency": w + (n - 1) * d}
            assert same(got[uid], want), f"plan {uid}={(a, w, n, d)}: expected {want}, got {got[uid]}"
        s = summary(events)
        start = min(a for a, *_ in plan.values())
        end = max(a + w + (n - 1) * d for a, w, n, d in plan.values())
        multi = [d for _, _, n, d in plan.values() if n > 1]
        want = {"mean_ttft": sum(w for _, w, _, _ in plan.values()) / len(plan),
                "mean_tpot": sum(multi) / len(multi) if multi else None,
                "throughput": sum(n for _, _, n, _ in plan.values()) / (end - start)}
        assert same(s, want), f"plan {plan}: expected {want}, got {s}"
