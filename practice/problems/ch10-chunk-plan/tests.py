import random

from solution import plan_chunks

EXAMPLES = ["test_statement_example", "test_waiting_for_an_arrival"]


def _token_oracle(prompt_lens, budget, arrivals):
    """Token-at-a-time simulation, grouped into (req, start, end) runs."""
    order = sorted(range(len(prompt_lens)), key=lambda i: (arrivals[i], i))
    stream = [(i, p, arrivals[i]) for i in order for p in range(prompt_lens[i])]
    batches, pos, step = [], 0, 0
    while pos < len(stream):
        toks = []
        while len(toks) < budget and pos < len(stream) and stream[pos][2] <= step:
            toks.append(stream[pos][:2])
            pos += 1
        batch = []
        for req, p in toks:
            if batch and batch[-1][0] == req:
                batch[-1] = (req, batch[-1][1], p + 1)
            else:
                batch.append((req, p, p + 1))
        batches.append(batch)
        step += 1
    return batches


def test_statement_example():
    got = plan_chunks([5, 3, 9], budget=4)
    want = [[(0, 0, 4)], [(0, 4, 5), (1, 0, 3)], [(2, 0, 4)], [(2, 4, 8)], [(2, 8, 9)]]
    assert got == want, f"got {got}"


def test_waiting_for_an_arrival():
    got = plan_chunks([2, 3], budget=4, arrivals=[0, 2])
    assert got == [[(0, 0, 2)], [], [(1, 0, 3)]], f"step 1 has nothing to do and must be an empty batch, got {got}"


def test_chunked_request_continues_before_a_new_arrival():
    got = plan_chunks([10, 2], budget=4, arrivals=[0, 1])
    want = [[(0, 0, 4)], [(0, 4, 8)], [(0, 8, 10), (1, 0, 2)]]
    assert got == want, f"request 0 is being chunked: it keeps the front of the queue, got {got}"


def test_budget_of_one_and_exact_fits():
    got = plan_chunks([2, 1], budget=1)
    assert got == [[(0, 0, 1)], [(0, 1, 2)], [(1, 0, 1)]], f"budget 1: one token per batch, request 0 first, got {got}"
    assert plan_chunks([4, 4], budget=4) == [[(0, 0, 4)], [(1, 0, 4)]], \
        "a prompt that exactly fills the budget completes: it is not a chunked request"
    assert plan_chunks([], budget=8) == [], "no prompts: no batches"


def test_invalid_inputs():
    for args in (([3], 0), ([3, 0], 4), ([-1], 4)):
        try:
            plan_chunks(*args)
        except ValueError:
            continue
        raise AssertionError(f"plan_chunks{args} should raise ValueError")


def test_invariants_when_all_arrive_at_once():
    rng = random.Random(5)
    for _ in range(50):
        lens = [rng.randint(1, 30) for _ in range(rng.randint(1, 8))]
        budget = rng.randint(1, 20)
        plan = plan_chunks(lens, budget)
        for k, batch in enumerate(plan):
            used = sum(e - s for _, s, e in batch)
            assert used <= budget, f"batch {k} uses {used} > budget {budget} ({lens})"
            if k < len(plan) - 1:
                assert used == budget, f"batch {k} of {len(plan)} uses {used}, not the full budget {budget} ({lens})"
        for req, n in enumerate(lens):
            chunks = [(s, e) for batch in plan for r, s, e in batch if r == req]
            covered = [p for s, e in chunks for p in range(s, e)]
            assert covered == list(range(n)), f"request {req}: prompt tokens must be computed once, in order: {chunks}"


def test_random_against_token_oracle():
    rng = random.Random(17)
    for _ in range(60):
        n = rng.randint(1, 7)
        lens = [rng.randint(1, 25) for _ in range(n)]
        arrivals = [rng.randint(0, 8) for _ in range(n)]
        budget = rng.randint(1, 12)
        want = _token_oracle(lens, budget, arrivals)
        got = plan_chunks(lens, budget, arrivals)
        assert got == want, f"plan_chunks({lens}, {budget}, {arrivals}): got {got}, expected {want}"
