import random

from solution import ratio_trace

EXAMPLES = ["test_statement_example", "test_the_floor_and_idle"]


def close(got, want) -> bool:
    return len(got) == len(want) and all(abs(a - b) < 1e-9 for a, b in zip(got, want))


def test_statement_example():
    got = ratio_trace(0.7, 0.1, 3, ["step", "step", "step", "step", ("retract", [(50, 100), (70, 100)]), "step",
                                    "idle"])
    want = [0.5, 0.3, 0.1, 0.1, 160 / 201, 160 / 201 - 0.2, 0.7]
    assert close(got, want), f"expected {want}, got {got}"


def test_the_floor_and_idle():
    got = ratio_trace(0.5, 0.2, 2, ["step"] * 5 + ["idle", "step"])
    want = [0.35, 0.2, 0.2, 0.2, 0.2, 0.5, 0.35]
    assert close(got, want), f"the decay stops at min_ratio and idle starts over at init: expected {want}, got {got}"


def test_a_retraction_never_lowers_it_below_init():
    got = ratio_trace(0.7, 0.1, 1, ["step", ("retract", [(5, 1000), (5, 1000)])])
    assert close(got, [0.1, 0.7]), \
        f"observed (10 + 40) / 2001 is 0.025: the ratio goes back to init 0.7, not lower; got {got}"


def test_a_retraction_is_capped_at_one():
    got = ratio_trace(0.7, 0.1, 1, [("retract", [(90, 100)])])
    assert close(got, [1.0]), f"(90 + 20) / 101 is more than 1: capped at 1; got {got}"


def test_the_plus_one_and_the_twenty():
    got = ratio_trace(0.1, 0.1, 1, [("retract", [(30, 99), (10, 100)])])
    assert close(got, [80 / 200]), f"(30 + 10 + 2 x 20) / (199 + 1) = 0.4; got {got}"
    got = ratio_trace(0.1, 0.1, 1, [("retract", [])])
    assert close(got, [0.1]), f"no request left: 0 / 1, so init; got {got}"


def test_no_events():
    assert ratio_trace(0.7, 0.1, 600, []) == [], "no events, no ratios"


def test_invalid_arguments():
    for args in ((0, 0.1, 1), (1.5, 0.1, 1), (0.5, 0.6, 1), (0.5, 0, 1), (0.5, 0.1, 0)):
        try:
            ratio_trace(*args, ["step"])
        except ValueError:
            continue
        raise AssertionError(f"ratio_trace{args} should raise ValueError")
    try:
        ratio_trace(0.7, 0.1, 1, ["decode"])
    except ValueError:
        return
    raise AssertionError("an unknown event ('decode') should raise ValueError")


def test_random_traces_against_the_rules():
    rng = random.Random(23)
    for _ in range(300):
        init = rng.choice([0.3, 0.5, 0.7, 1.0])
        low = init * rng.choice([0.14, 0.5, 1.0])
        steps = rng.randint(1, 20)
        events = []
        for _ in range(rng.randint(0, 30)):
            kind = rng.random()
            if kind < 0.7:
                events.append("step")
            elif kind < 0.9:
                events.append(("retract", [(rng.randint(0, 50), rng.randint(50, 200)) for _ in range(rng.randint(0, 4))]))
            else:
                events.append("idle")
        got = ratio_trace(init, low, steps, events)
        ctx = f"ratio_trace({init}, {low}, {steps}, {events})"
        assert len(got) == len(events), f"{ctx}: one ratio per event, got {got}"
        cur = init
        for event, value in zip(events, got):
            if event == "step":
                cur = max(cur - (init - low) / steps, low)
            elif event == "idle":
                cur = init
            else:
                run = event[1]
                cur = min(1.0, max(init, (sum(g for g, _ in run) + 20 * len(run)) / (sum(m for _, m in run) + 1)))
            assert abs(value - cur) < 1e-9, f"{ctx}: after {event!r} expected {cur}, got {value}"
            assert low - 1e-12 <= value <= 1.0, f"{ctx}: the ratio left [{low}, 1]: {value}"
