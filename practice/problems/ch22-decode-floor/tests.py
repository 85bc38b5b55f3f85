import math
import random

from solution import decode_floor

EXAMPLES = ["test_statement_examples"]


def close(got, want):
    return got[0] == want[0] and math.isclose(got[1], want[1], rel_tol=1e-9, abs_tol=1e-12)


def oracle(requests, max_batch, w, kv, bw):
    """Per-request timelines: each request occupies a slot from the step it starts for n - 1 steps; a slot
    frees when its request ends, and the next waiting request takes the slot that frees first."""
    slots = [0] * max_batch  # the first step each slot is free again
    reads = {}  # step -> context tokens read in it
    last = 0
    for p, n in requests:
        if n == 1:
            continue
        i = min(range(max_batch), key=lambda k: slots[k])
        start = slots[i]
        for j in range(1, n):
            reads[start + j - 1] = reads.get(start + j - 1, 0) + p + j
        slots[i] = start + n - 1
        last = max(last, slots[i])
    return last, sum((w + kv * reads.get(s, 0)) / bw for s in range(last))


def test_statement_examples():
    assert close(decode_floor([(10, 3), (4, 2)], 1, 100, 1, 10.0), (3, 32.8)), "one at a time"
    assert close(decode_floor([(10, 3), (4, 2)], 2, 100, 1, 10.0), (2, 22.8)), "both together"
    assert close(decode_floor([(7, 1)], 4, 100, 1, 10.0), (0, 0.0)), "one output token: no decode step"


def test_bad_input():
    for args in (([(3, 2)], 0, 1, 1, 1.0), ([(3, 2)], 1, 1, 1, 0.0), ([(0, 2)], 1, 1, 1, 1.0), ([(3, 0)], 1, 1, 1, 1.0)):
        try:
            decode_floor(*args)
        except ValueError:
            continue
        raise AssertionError(f"decode_floor{args} should raise ValueError")


def test_single_token_requests_take_no_place():
    got = decode_floor([(5, 1), (2, 3), (9, 1)], 1, 0, 1, 1.0)
    assert close(got, (2, 3.0 + 4.0)), f"only the (2, 3) request decodes, with contexts 3 and 4; got {got}"


def test_unlimited_batch_matches_the_closed_form():
    rng = random.Random(1)
    for _ in range(100):
        reqs = [(rng.randint(1, 50), rng.randint(1, 20)) for _ in range(rng.randint(1, 10))]
        w, kv, bw = rng.uniform(0, 100), rng.uniform(0, 3), rng.uniform(1, 10)
        steps = max(n for _, n in reqs) - 1
        tokens = sum((n - 1) * p + (n - 1) * n // 2 for p, n in reqs)  # sum over j of p + j
        want = (steps, (steps * w + kv * tokens) / bw)
        assert close(decode_floor(reqs, len(reqs), w, kv, bw), want), f"{reqs}: no batch limit"


def test_random_schedules_against_per_request_timelines():
    rng = random.Random(22)
    for _ in range(300):
        reqs = [(rng.randint(1, 30), rng.randint(1, 12)) for _ in range(rng.randint(1, 9))]
        b = rng.randint(1, 4)
        w, kv, bw = rng.uniform(0, 50), rng.uniform(0, 2), rng.uniform(1, 5)
        got, want = decode_floor(reqs, b, w, kv, bw), oracle(reqs, b, w, kv, bw)
        assert close(got, want), f"requests {reqs}, max_batch {b}: expected {want}, got {got}"


def test_a_larger_batch_never_needs_more_steps():
    rng = random.Random(9)
    for _ in range(100):
        reqs = [(rng.randint(1, 30), rng.randint(1, 12)) for _ in range(rng.randint(1, 9))]
        steps = [decode_floor(reqs, b, 1, 1, 1.0)[0] for b in range(1, 6)]
        assert steps == sorted(steps, reverse=True), f"{reqs}: steps by max_batch 1..5 = {steps}"
