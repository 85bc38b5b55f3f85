import random

from solution import apply_penalties

EXAMPLES = ["test_statement_example", "test_a_token_of_the_prompt_only"]


def close(got, want) -> bool:
    return len(got) == len(want) and all(abs(a - b) < 1e-9 for a, b in zip(got, want))


def test_statement_example():
    got = apply_penalties([2.0, -1.0, 0.5, 3.0, -0.5], prompt=[0, 1], output=[3, 3, 1], presence=0.5,
                          frequency=0.25, repetition=2.0)
    want = [1.0, -2.75, 0.5, 0.5, -0.5]
    assert close(got, want), f"expected {want}, got {got}"


def test_a_token_of_the_prompt_only():
    got = apply_penalties([2.0, -1.0, 0.5, 3.0, -0.5], prompt=[0, 1], output=[3, 3, 1], presence=0.5,
                          frequency=0.25, repetition=1.0)
    want = [2.0, -1.75, 0.5, 2.0, -0.5]
    assert close(got, want), \
        f"token 0 is only in the prompt: without a repetition penalty its logit stays 2.0; expected {want}, got {got}"


def test_openai_penalties_count_the_output_only():
    logits = [1.0, 1.0, 1.0, 1.0]
    got = apply_penalties(logits, prompt=[1, 1, 1, 2], output=[1, 3, 3], presence=0.25, frequency=0.5)
    want = [1.0, 0.25, 1.0, -0.25]
    assert close(got, want), (
        "token 1 occurs 3 times in the prompt but once in the output: 1 - 0.5 x 1 - 0.25; token 2 (prompt only) "
        f"keeps 1.0; token 3 (twice in the output): 1 - 0.5 x 2 - 0.25; expected {want}, got {got}")


def test_the_repetition_penalty_reaches_the_prompt():
    got = apply_penalties([3.0, -2.0, 1.0], prompt=[0, 1], output=[], repetition=1.5)
    want = [2.0, -3.0, 1.0]
    assert close(got, want), \
        f"no token generated yet, but tokens 0 and 1 were seen in the prompt: penalised; expected {want}, got {got}"


def test_negative_logits_are_multiplied():
    got = apply_penalties([-2.0, 4.0, -0.5, 0.0], prompt=[0, 1, 2, 3], output=[], repetition=2.0)
    want = [-4.0, 2.0, -1.0, 0.0]
    assert close(got, want), (
        "a penalty above 1 must make every seen token less likely: negative logits are multiplied (dividing "
        f"-2 by 2 gives -1, more likely than before); expected {want}, got {got}")
    got = apply_penalties([-2.0, 4.0], prompt=[0, 1], output=[], repetition=0.5)
    want = [-1.0, 8.0]
    assert close(got, want), f"a penalty below 1 makes seen tokens more likely; expected {want}, got {got}"


def test_the_repetition_penalty_applies_once_per_token():
    got = apply_penalties([8.0, -1.0, 5.0], prompt=[0, 0, 1], output=[0, 1, 1, 0], repetition=2.0)
    want = [4.0, -2.0, 5.0]
    assert close(got, want), (
        "token 0 was seen 4 times, token 1 three times: each is divided (or multiplied) by the penalty once, "
        f"not once per occurrence; expected {want}, got {got}")


def test_repetition_first_then_openai():
    got = apply_penalties([1.0, 4.0, -1.0], prompt=[], output=[0, 1, 2], presence=2.0, repetition=2.0)
    want = [-1.5, 0.0, -4.0]
    assert close(got, want), (
        "1.0 / 2 - 2 = -1.5 (subtracting first gives -1, then x 2 = -2), 4.0 / 2 - 2 = 0 (first: (4 - 2) / 2 = 1), "
        f"-1 x 2 - 2 = -4 (first: (-1 - 2) x 2 = -6); expected {want}, got {got}")


def test_frequency_and_presence_together():
    got = apply_penalties([0.0, 0.0, 0.0], prompt=[2], output=[0, 0, 0, 1], presence=1.0, frequency=0.5)
    want = [-2.5, -1.5, 0.0]
    assert close(got, want), \
        f"presence once per token, frequency per occurrence: 3 x 0.5 + 1 and 0.5 + 1; expected {want}, got {got}"
    got = apply_penalties([0.0, 0.0], prompt=[], output=[0, 0, 1], presence=-1.0, frequency=-0.5)
    assert close(got, [2.0, 1.5]), f"negative penalties encourage repeats: expected [2.0, 1.5], got {got}"


def test_no_penalties_change_nothing():
    logits = [0.5, -3.0, 2.25, 7.0]
    got = apply_penalties(logits, prompt=[0, 1], output=[2, 2, 3])
    assert got == logits, f"presence 0, frequency 0 and repetition 1 leave the row as it is: got {got}"
    got = apply_penalties(logits, prompt=[0], output=[1], presence=1.0, frequency=1.0, repetition=3.0)
    assert logits == [0.5, -3.0, 2.25, 7.0], f"the logits passed in were changed in place: {logits}"
    assert got is not logits, "return a new list"


def test_invalid_arguments():
    row = [0.0, 1.0, 2.0]
    for kwargs in ({"presence": 2.5}, {"frequency": -2.01}, {"repetition": 0.0}, {"repetition": -1.0},
                   {"prompt": [3]}, {"output": [-1]}):
        args = {"prompt": [0], "output": [1]} | kwargs
        try:
            apply_penalties(row, **args)
        except ValueError:
            continue
        raise AssertionError(f"apply_penalties({row}, {args}) should raise ValueError")


def reference(logits, prompt, output, presence, frequency, repetition):
    out = list(logits)
    for t in range(len(out)):
        if t in prompt or t in output:
            out[t] = out[t] / repetition if out[t] > 0 else out[t] * repetition
        out[t] -= frequency * output.count(t) + (presence if t in output else 0.0)
    return out


def test_random_rows_against_the_rules():
    rng = random.Random(24)
    for _ in range(300):
        vocab = rng.randint(1, 12)
        logits = [rng.choice([rng.uniform(-5, 5), 0.0, -float("inf")]) for _ in range(vocab)]
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(0, 8))]
        output = [rng.randrange(vocab) for _ in range(rng.randint(0, 8))]
        presence, frequency = rng.choice([0.0, 0.5, 2.0, -1.0]), rng.choice([0.0, 0.25, 1.5, -2.0])
        repetition = rng.choice([1.0, 0.5, 1.3, 2.0])
        got = apply_penalties(list(logits), list(prompt), list(output), presence, frequency, repetition)
        want = reference(logits, prompt, output, presence, frequency, repetition)
        ctx = f"apply_penalties({logits}, {prompt}, {output}, {presence}, {frequency}, {repetition})"
        assert len(got) == vocab, f"{ctx}: one logit per token, got {got}"
        for t, (a, b) in enumerate(zip(got, want)):
            assert a == b or abs(a - b) < 1e-9, f"{ctx}: token {t} expected {b}, got {a}"
