import random

from solution import schedule

EXAMPLES = ["test_statement_example", "test_late_arrival_idles_then_joins"]


def test_statement_example():
    got = schedule([("A", 0, 5, 3), ("B", 0, 4, 1), ("C", 0, 6, 2)], max_running=2, token_budget=100)
    want = [("prefill", ["A", "B"]), ("prefill", ["C"]), ("decode", ["A", "C"]), ("decode", ["A"])]
    assert got == want, f"expected {want}, got {got}"


def test_late_arrival_idles_then_joins():
    got = schedule([("A", 0, 3, 3), ("B", 4, 2, 2), ("C", 6, 2, 1)], max_running=4, token_budget=10)
    want = [("prefill", ["A"]), ("decode", ["A"]), ("decode", ["A"]), ("idle", []),
            ("prefill", ["B"]), ("decode", ["B"]), ("prefill", ["C"])]
    assert got == want, f"A finishes at step 2, nothing is waiting at step 3 (idle), B arrives at 4; got {got}"


def test_token_budget_splits_prefills_without_skipping():
    # A+B = 8 > 7 so B waits; C (1 token) would fit but must not jump ahead of B
    got = schedule([("A", 0, 4, 2), ("B", 0, 4, 2), ("C", 0, 1, 2)], max_running=8, token_budget=7)
    want = [("prefill", ["A"]), ("prefill", ["B", "C"]), ("decode", ["A", "B", "C"])]
    assert got == want, f"admission stops at the first prompt that does not fit; got {got}"


def test_prefill_has_priority_over_decode():
    got = schedule([("A", 0, 2, 4), ("B", 1, 2, 1), ("C", 2, 2, 1)], max_running=8, token_budget=8)
    want = [("prefill", ["A"]), ("prefill", ["B"]), ("prefill", ["C"]), ("decode", ["A"]),
            ("decode", ["A"]), ("decode", ["A"])]
    assert got == want, f"a newly arrived request is prefilled before running ones decode; got {got}"


def test_arrival_order_not_list_order():
    got = schedule([("late", 1, 1, 1), ("early", 0, 1, 1)], max_running=1, token_budget=5)
    want = [("prefill", ["early"]), ("prefill", ["late"])]
    assert got == want, f"the waiting queue is ordered by arrival step; got {got}"


def test_single_slot_serialises_requests():
    got = schedule([("A", 0, 1, 2), ("B", 0, 1, 2)], max_running=1, token_budget=5)
    want = [("prefill", ["A"]), ("decode", ["A"]), ("prefill", ["B"]), ("decode", ["B"])]
    assert got == want, f"a freed slot is reused on the next step; got {got}"


def test_empty_and_invalid():
    assert schedule([], 4, 10) == [], "no requests, no steps"
    for reqs in ([("A", 0, 11, 1)], [("A", 0, 3, 0)]):
        try:
            schedule(reqs, 4, 10)
        except ValueError:
            continue
        raise AssertionError(f"schedule({reqs}, 4, 10) should raise ValueError")


def test_random_traces_respect_every_rule():
    rng = random.Random(7)
    for _ in range(150):
        n, max_running, budget = rng.randint(1, 9), rng.randint(1, 4), rng.randint(4, 12)
        reqs = [(f"r{i}", rng.randint(0, 6), rng.randint(1, budget), rng.randint(1, 5)) for i in range(n)]
        info = {u: (a, pl, ol) for u, a, pl, ol in reqs}
        queue = [u for u, *_ in sorted(reqs, key=lambda r: (r[1], reqs.index(r)))]
        steps = schedule(reqs, max_running, budget)
        running, produced, prefilled = [], {u: 0 for u in info}, []
        for step, (kind, uids) in enumerate(steps):
            ctx = f"requests={reqs} max_running={max_running} budget={budget}: step {step} {kind} {uids}"
            arrived = [u for u in queue if info[u][0] <= step]
            head_fits = (arrived and len(running) < max_running)
            if kind == "prefill":
                assert uids == queue[:len(uids)] and uids, f"{ctx}: prefill must take the head of the queue"
                assert all(info[u][0] <= step for u in uids), f"{ctx}: prefilled before arrival"
                assert sum(info[u][1] for u in uids) <= budget, f"{ctx}: token budget exceeded"
                assert len(running) + len(uids) <= max_running, f"{ctx}: too many running"
                nxt = queue[len(uids)] if len(uids) < len(queue) else None
                if nxt is not None and info[nxt][0] <= step and len(running) + len(uids) < max_running:
                    assert sum(info[u][1] for u in uids) + info[nxt][1] > budget, f"{ctx}: {nxt} also fits"
                queue = queue[len(uids):]
                running += uids
                prefilled += uids
            elif kind == "decode":
                assert not head_fits, f"{ctx}: a waiting request could have been prefilled"
                assert uids == running and uids, f"{ctx}: decode must run every running request, got {running}"
            else:
                assert kind == "idle" and uids == [] and not running and not arrived, f"{ctx}: bad idle step"
            for u in uids:
                produced[u] += 1
            running = [u for u in running if produced[u] < info[u][2]]
        assert not queue and not running, f"requests={reqs}: the loop ended with work left"
        assert all(produced[u] == info[u][2] for u in info), f"requests={reqs}: wrong token counts {produced}"
        assert sorted(prefilled) == sorted(info), f"requests={reqs}: each request is prefilled exactly once"
