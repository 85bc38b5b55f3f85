import random

from solution import run_steps

EXAMPLES = ["test_statement_example_chunked", "test_statement_example_unchunked"]


def _oracle(prompt_lens, max_tokens, chunk_size):
    """Closed form: prefills run back to back, one chunk per step; decodes follow each prefill."""
    steps_of = []
    for p in prompt_lens:
        c = p if chunk_size is None else chunk_size
        steps_of.append([(s, min(s + c, p)) for s in range(0, p, c)])
    chunk_at, step = {}, 0
    finish_prefill = []
    for i, chunks in enumerate(steps_of):
        for s, e in chunks:
            chunk_at[step] = (i, s, e)
            step += 1
        finish_prefill.append(step - 1)
    last = max([step - 1] + [f + m - 1 for f, m in zip(finish_prefill, max_tokens)])
    steps = []
    for t in range(last + 1):
        decodes = [i for i, (f, m) in enumerate(zip(finish_prefill, max_tokens)) if f < t <= f + m - 1]
        steps.append((chunk_at.get(t), decodes))
    costs = [(c[2] - c[1] if c else 0) + len(d) for c, d in steps if d]
    return steps, max(costs, default=0)


def test_statement_example_chunked():
    steps, stall = run_steps([2, 12], [4, 1], chunk_size=4)
    assert steps == [((0, 0, 2), []), ((1, 0, 4), [0]), ((1, 4, 8), [0]), ((1, 8, 12), [0])], f"got {steps}"
    assert stall == 5, f"each step computes a 4-token chunk plus one decode: stall 5, got {stall}"


def test_statement_example_unchunked():
    steps, stall = run_steps([2, 12], [4, 1], chunk_size=None)
    assert steps == [((0, 0, 2), []), ((1, 0, 12), [0]), (None, [0]), (None, [0])], f"got {steps}"
    assert stall == 13, f"the 12-token prefill plus one decode: stall 13, got {stall}"


def test_decode_starts_the_step_after_prefill_completes():
    steps, stall = run_steps([6, 2], [3, 2], chunk_size=4)
    want = [((0, 0, 4), []), ((0, 4, 6), []), ((1, 0, 2), [0]), (None, [0, 1])]
    assert steps == want, f"a sequence whose prefill completes in step t decodes from step t+1: got {steps}"
    assert stall == 3


def test_single_token_outputs_never_decode():
    steps, stall = run_steps([3, 3], [1, 1], chunk_size=2)
    assert steps == [((0, 0, 2), []), ((0, 2, 3), []), ((1, 0, 2), []), ((1, 2, 3), [])], f"got {steps}"
    assert stall == 0, "no step decodes, so there is no decode stall"


def test_invalid_inputs():
    for args in (([0], [1], 4), ([3], [0], 4), ([3], [2], 0)):
        try:
            run_steps(*args)
        except ValueError:
            continue
        raise AssertionError(f"run_steps{args} should raise ValueError")


def test_chunking_bounds_the_stall():
    rng = random.Random(3)
    for _ in range(40):
        n = rng.randint(1, 6)
        lens = [rng.randint(1, 60) for _ in range(n)]
        maxes = [rng.randint(1, 10) for _ in range(n)]
        c = rng.randint(1, 8)
        _, stall = run_steps(lens, maxes, c)
        assert stall <= c + n, f"with chunk_size={c} a step costs at most {c} + {n} decoders, got stall {stall}"
        assert run_steps(lens, maxes, max(lens)) == run_steps(lens, maxes, None), \
            "a chunk_size of at least the longest prompt must behave like chunk_size=None"


def test_random_against_oracle():
    rng = random.Random(23)
    for _ in range(80):
        n = rng.randint(1, 6)
        lens = [rng.randint(1, 20) for _ in range(n)]
        maxes = [rng.randint(1, 8) for _ in range(n)]
        c = rng.choice([None, 1, 2, 3, 5, 8])
        got = run_steps(lens, maxes, c)
        want = _oracle(lens, maxes, c)
        assert got == want, f"run_steps({lens}, {maxes}, {c}): got {got}, expected {want}"
