import math
import random
import statistics

from solution import latency_report, percentile

EXAMPLES = ["test_statement_examples"]
REQS = [(0.0, [0.5, 0.7, 0.9]), (0.0, [2.0]), (1.0, [1.2, 2.2])]


def close(x, y):
    if x is None or y is None:
        return x is None and y is None
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def same(got: dict, want: dict) -> bool:
    return set(got) == set(want) and all(close(got[k], want[k]) for k in want)


def raises(fn, *args) -> bool:
    try:
        fn(*args)
    except ValueError:
        return True
    return False


def test_statement_examples():
    assert close(percentile([3.0, 1.0, 2.0, 4.0], 50), 2.5), "the median of 1, 2, 3, 4 is between 2 and 3"
    assert close(percentile([5.0], 99), 5.0), "one value is every percentile"
    want = {"p50_ttft": 0.5, "p99_ttft": 1.97, "p50_tpot": 0.6, "p99_tpot": 0.992, "goodput": 1 / 3}
    got = latency_report(REQS, 1.0, 0.5)
    assert same(got, want), f"expected {want}, got {got}"


def test_percentile_ends_and_order():
    xs = [7.0, -2.0, 3.5, 3.5, 10.0]
    assert close(percentile(xs, 0), -2.0) and close(percentile(xs, 100), 10.0), "q = 0 and 100 are min and max"
    assert xs == [7.0, -2.0, 3.5, 3.5, 10.0], "the input list must not be reordered"
    assert close(percentile(xs, 25), 3.5) and close(percentile(xs, 90), 8.8)


def test_percentile_against_the_statistics_module():
    rng = random.Random(22)
    for _ in range(300):
        xs = [rng.uniform(-5, 5) for _ in range(rng.randint(2, 40))]
        # statistics.quantiles(..., method="inclusive") cuts at the same interpolated ranks
        cuts = statistics.quantiles(xs, n=100, method="inclusive")
        q = rng.randint(1, 99)
        assert close(percentile(xs, q), cuts[q - 1]), f"p{q} of {xs}"


def test_bad_input():
    assert raises(percentile, [], 50), "empty list"
    assert raises(percentile, [1.0], -1) and raises(percentile, [1.0], 100.5), "q outside [0, 100]"
    assert raises(latency_report, [(0.0, [2.0, 1.0])], 1.0, 1.0), "token times going backwards"
    assert raises(latency_report, [(3.0, [2.0])], 1.0, 1.0), "a token before its submit time"


def test_requests_without_tokens_and_without_tpot():
    got = latency_report([(0.0, []), (0.0, [0.3])], 1.0, 0.1)
    want = {"p50_ttft": 0.3, "p99_ttft": 0.3, "p50_tpot": None, "p99_tpot": None, "goodput": 0.5}
    assert same(got, want), f"a request with no token is not good; one token has no TPOT: {got}"
    empty = latency_report([], 1.0, 1.0)
    assert all(v is None for v in empty.values()), f"nothing to report: {empty}"


def test_random_runs_against_a_direct_count():
    rng = random.Random(5)
    for _ in range(100):
        plan = [(rng.uniform(0, 3), rng.uniform(0, 2), rng.randint(0, 5), rng.uniform(0.01, 0.3))
                for _ in range(rng.randint(1, 12))]  # submit, wait, tokens, gap
        reqs = [(s, [s + w + k * g for k in range(n)]) for s, w, n, g in plan]
        slo_ttft, slo_tpot = rng.uniform(0, 2), rng.uniform(0, 0.3)
        got = latency_report(reqs, slo_ttft, slo_tpot)
        good = sum(1 for s, w, n, g in plan if n >= 1 and w <= slo_ttft and (n == 1 or g <= slo_tpot + 1e-12))
        borderline = any(n >= 2 and abs(g - slo_tpot) < 1e-9 for _, _, n, g in plan)
        if not borderline:
            assert close(got["goodput"], good / len(plan)), f"goodput of {plan}"
        waits = [w for _, w, n, _ in plan if n >= 1]
        if len(waits) >= 2:
            assert close(got["p50_ttft"], statistics.quantiles(waits, n=100, method="inclusive")[49])
