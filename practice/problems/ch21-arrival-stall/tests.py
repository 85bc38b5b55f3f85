import math
import random

from solution import arrival_costs

EXAMPLES = ["test_statement_example", "test_no_decoders"]


def _simulate(prompt_len, budget, decoders, step_ms, token_ms, mixed):
    """Step by step on a clock: (longest gap of a running request, the prompt's TTFT)."""
    clock, last_token, gap, left, ttft = 0.0, 0.0, 0.0, prompt_len, None
    while ttft is None or (not mixed and clock == ttft):
        rows = decoders if mixed else (0 if left else decoders + 1)
        chunk = min(budget - rows, left) if mixed else min(budget, left)
        clock += step_ms + token_ms * (rows + chunk)
        left -= chunk
        if rows:
            gap, last_token = max(gap, clock - last_token), clock
        if left == 0 and ttft is None:
            ttft = clock
    return gap, ttft


def _close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def test_statement_example():
    got = arrival_costs(prompt_len=100, budget=40, decoders=8, step_ms=10.0, token_ms=0.5)
    want = {"gap_off": 94.5, "gap_on": 30.0, "ttft_off": 80.0, "ttft_on": 106.0}
    assert got.keys() == want.keys() and all(_close(got[k], want[k]) for k in want), f"got {got}"


def test_no_decoders():
    got = arrival_costs(prompt_len=10, budget=4, decoders=0, step_ms=1.0, token_ms=1.0)
    assert _close(got["ttft_on"], got["ttft_off"]) and _close(got["ttft_off"], 13.0), \
        f"with nobody decoding both modes read the prompt in chunks of 4, 4, 2 (5 + 5 + 3 ms), got {got}"


def test_a_prompt_that_fits_in_one_step():
    got = arrival_costs(prompt_len=5, budget=16, decoders=3, step_ms=2.0, token_ms=1.0)
    assert _close(got["gap_on"], 10.0) and _close(got["ttft_on"], 10.0), f"one mixed step of 3 + 5 tokens, got {got}"
    assert _close(got["ttft_off"], 7.0) and _close(got["gap_off"], 13.0), f"prefill 5, then decode 4 tokens, got {got}"


def test_invalid_inputs():
    for args in ((0, 8, 1, 1.0, 1.0), (8, 4, 4, 1.0, 1.0), (8, 4, -1, 1.0, 1.0), (8, 4, 1, -1.0, 1.0)):
        try:
            arrival_costs(*args)
        except ValueError:
            continue
        raise AssertionError(f"arrival_costs{args} should raise ValueError")


def test_random_against_a_step_simulation():
    rng = random.Random(21)
    for _ in range(300):
        decoders = rng.randint(0, 10)
        args = (rng.randint(1, 200), decoders + rng.randint(1, 30), decoders, rng.uniform(0, 20), rng.uniform(0, 2))
        got = arrival_costs(*args)
        gap_off, ttft_off = _simulate(*args, mixed=False)
        gap_on, ttft_on = _simulate(*args, mixed=True)
        want = {"gap_off": gap_off, "gap_on": gap_on, "ttft_off": ttft_off, "ttft_on": ttft_on}
        if decoders == 0:
            want["gap_on"] = got["gap_on"]  # no running request: nobody's gap to compare
        assert all(_close(got[k], want[k]) for k in want), f"arrival_costs{args}: got {got}, expected {want}"
