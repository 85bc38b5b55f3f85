import random

from solution import Req, trace

EXAMPLES = ["test_statement_example", "test_fresh_request"]


def test_statement_example():
    got = trace(5, 3, prefix_hit=2)
    assert got == [(2, 5, 3), (5, 6, 1), (6, 7, 1)], f"expected [(2, 5, 3), (5, 6, 1), (6, 7, 1)], got {got}"


def test_fresh_request():
    r = Req(4, 2)
    state = (r.cached_len, r.device_len, r.max_device_len, r.extend_len, r.remain_len, r.can_decode)
    assert state == (0, 4, 6, 4, 2, True), \
        f"(cached, device, max_device, extend, remain, can_decode) should be (0, 4, 6, 4, 2, True), got {state}"
    r.complete_one()
    state = (r.cached_len, r.device_len, r.extend_len, r.remain_len, r.can_decode)
    assert state == (4, 5, 1, 1, True), f"after prefill: (cached, device, extend, remain, can_decode) = (4, 5, 1, 1, True), got {state}"
    r.complete_one()
    assert (r.cached_len, r.device_len, r.remain_len, r.can_decode) == (5, 6, 0, False), \
        f"after 2 passes for output_len=2 the request is done, got cached={r.cached_len} device={r.device_len} remain={r.remain_len}"


def test_finished_request_refuses_to_complete():
    r = Req(2, 1)
    r.complete_one()
    try:
        r.complete_one()
    except RuntimeError:
        return
    raise AssertionError("complete_one() on a request with remain_len == 0 should raise RuntimeError")


def test_constructor_validates():
    for args in ((0, 3), (3, 0), (3, 2, 3), (3, 2, -1), (3, 2, 5)):
        try:
            Req(*args)
        except ValueError:
            continue
        raise AssertionError(f"Req{args} should raise ValueError")
    assert Req(3, 1, 2).extend_len == 1, "cached_len = prompt_len - 1 is allowed: one token left to compute"


def test_whole_prompt_hit_is_clipped():
    for args, expected in (((4, 2, 4), [(3, 4, 1), (4, 5, 1)]), ((4, 1, 99), [(3, 4, 1)])):
        try:
            got = trace(*args)
        except ValueError as e:
            raise AssertionError(f"trace{args} raised ValueError ({e}): clip the prefix hit to prompt_len - 1 first")
        assert got == expected, f"trace{args}: a hit on the whole prompt still computes its last token, expected {expected}, got {got}"


def test_one_output_token_is_one_pass():
    assert trace(1, 1) == [(0, 1, 1)], f"got {trace(1, 1)}"


def test_random_traces_are_consistent():
    rng = random.Random(2)
    for _ in range(200):
        p, o, hit = rng.randint(1, 30), rng.randint(1, 30), rng.randint(0, 40)
        got = trace(p, o, hit)
        start = min(hit, p - 1)
        assert len(got) == o, f"trace({p}, {o}, {hit}): {o} output tokens need {o} passes, got {len(got)}"
        assert got[0] == (start, p, p - start), f"trace({p}, {o}, {hit}): prefill should be {(start, p, p - start)}, got {got[0]}"
        for i in range(1, len(got)):
            assert got[i] == (p + i - 1, p + i, 1), f"trace({p}, {o}, {hit}): decode pass {i} should be {(p + i - 1, p + i, 1)}, got {got[i]}"
        computed = sum(e for _, _, e in got)
        assert computed == p - start + o - 1, f"every token but the last sampled one is computed exactly once: {computed}"
