import random

from solution import plan_steps

EXAMPLES = ["test_statement_example_mixed", "test_statement_example_not_mixed"]


def _token_oracle(running, prompt_len, prompt_output, budget, mixed):
    """Fill each step one token at a time: every decode row first, then prompt tokens up to the budget."""
    left, done, steps = list(running), 0, []
    while done < prompt_len or any(left):
        used, rows, start = 0, [], done
        prefill_only = not mixed and done < prompt_len
        for i, n in enumerate(left):
            if n > 0 and not prefill_only:
                rows.append(i)  # a decode row is never dropped, even past the budget
                used += 1
        while done < prompt_len and used < budget:
            done += 1
            used += 1
        for i in rows:
            left[i] -= 1
        chunk = (start, done) if done > start else None
        if chunk and done == prompt_len:
            left.append(prompt_output - 1)
        steps.append((rows, chunk))
    return steps


def test_statement_example_mixed():
    got = plan_steps([2, 3], prompt_len=7, prompt_output=2, budget=4, mixed=True)
    want = [([0, 1], (0, 2)), ([0, 1], (2, 4)), ([1], (4, 7)), ([2], None)]
    assert got == want, f"got {got}"


def test_statement_example_not_mixed():
    got = plan_steps([2, 3], prompt_len=7, prompt_output=2, budget=4, mixed=False)
    want = [([], (0, 4)), ([], (4, 7)), ([0, 1, 2], None), ([0, 1], None), ([1], None)]
    assert got == want, f"got {got}"


def test_decode_rows_can_fill_the_whole_budget():
    got = plan_steps([1, 2, 1], prompt_len=3, prompt_output=1, budget=3, mixed=True)
    want = [([0, 1, 2], None), ([1], (0, 2)), ([], (2, 3))]
    assert got == want, f"three decode rows take the budget of 3: the prompt waits one step, got {got}"


def test_a_prompt_of_one_output_token_never_decodes():
    got = plan_steps([1], prompt_len=2, prompt_output=1, budget=8, mixed=True)
    assert got == [([0], (0, 2))], f"its only token comes from the prefill step, got {got}"


def test_longest_gap_is_one_step_when_mixed():
    steps = plan_steps([6, 6, 6], prompt_len=40, prompt_output=3, budget=8, mixed=True)
    for i in range(3):
        at = [k for k, (rows, _) in enumerate(steps) if i in rows]
        assert at == list(range(6)), f"request {i} decodes in every one of the first 6 steps, got steps {at}"
    off = plan_steps([6, 6, 6], prompt_len=40, prompt_output=3, budget=8, mixed=False)
    assert [rows for rows, _ in off[:5]] == [[]] * 5, "without mixing 5 prefill steps of 8 come first"


def test_invalid_inputs():
    for args in (([2], 3, 1, 0, True), ([2], 0, 1, 4, True), ([2], 3, 0, 4, False), ([0], 3, 1, 4, True)):
        try:
            plan_steps(*args)
        except ValueError:
            continue
        raise AssertionError(f"plan_steps{args} should raise ValueError")


def test_random_against_token_oracle():
    rng = random.Random(21)
    for _ in range(200):
        running = [rng.randint(1, 9) for _ in range(rng.randint(0, 6))]
        args = (running, rng.randint(1, 40), rng.randint(1, 5), rng.randint(1, 12), rng.random() < 0.5)
        want = _token_oracle(*args)
        got = plan_steps(*args)
        assert got == want, f"plan_steps{args}: got {got}, expected {want}"
