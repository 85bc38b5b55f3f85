import random

from solution import cat_growth, kv_bytes_per_token, preallocated

EXAMPLES = ["test_statement_example", "test_bytes_per_token"]


def test_statement_example():
    assert cat_growth([4, 1, 1, 1]) == {"written": 22, "peak": 13}, \
        f"cat_growth([4, 1, 1, 1]) should write 4 + 5 + 6 + 7 = 22 tokens with a peak of 6 + 7 = 13, got {cat_growth([4, 1, 1, 1])}"
    assert preallocated([4, 1, 1, 1], 8) == {"written": 7, "peak": 8}, \
        f"preallocated writes only the new tokens, got {preallocated([4, 1, 1, 1], 8)}"


def test_bytes_per_token():
    got = kv_bytes_per_token(28, 8, 128, 2)
    assert got == 114688, f"Qwen3-0.6B bf16: 2 (k and v) * 28 * 8 * 128 * 2 = 114688 bytes, got {got}"
    got = kv_bytes_per_token(1, 1, 1, 4)
    assert got == 8, f"one layer, one head, head_dim 1, float32: a key and a value, 8 bytes, got {got}"


def test_single_prefill_chunk():
    assert cat_growth([5]) == {"written": 5, "peak": 5}, \
        f"the first pass only creates the cache: nothing old to copy, got {cat_growth([5])}"


def test_no_chunks():
    assert cat_growth([]) == {"written": 0, "peak": 0}, f"got {cat_growth([])}"
    assert preallocated([], 4) == {"written": 0, "peak": 4}, f"got {preallocated([], 4)}"


def test_closed_form_is_quadratic():
    for prompt, steps in [(1, 1), (10, 0), (7, 20), (100, 300)]:
        got = cat_growth([prompt] + [1] * steps)["written"]
        expected = prompt * (steps + 1) + steps * (steps + 1) // 2
        assert got == expected, f"prompt {prompt}, {steps} decode steps: expected P(T+1) + T(T+1)/2 = {expected}, got {got}"


def test_overflow_and_bad_chunks_are_refused():
    cases = [(preallocated, ([4, 1, 1, 1], 6)), (cat_growth, ([3, 0],)), (cat_growth, ([-1],)),
             (preallocated, ([2, 0], 10))]
    for fn, args in cases:
        try:
            fn(*args)
        except ValueError:
            continue
        raise AssertionError(f"{fn.__name__}{args} should raise ValueError")
    assert preallocated([4, 1, 1, 1, 1], 8)["written"] == 8, "exactly filling the buffer is fine"


def test_random_chunks_against_a_list_simulation():
    rng = random.Random(0)
    for _ in range(50):
        chunks = [rng.randint(1, 9) for _ in range(rng.randint(1, 12))]
        cache, written, peak = [], 0, 0
        for m in chunks:
            new = cache + ["t"] * m  # what torch.cat builds
            written += len(new)
            peak = max(peak, len(cache) + len(new))
            cache = new
        got = cat_growth(chunks)
        assert got == {"written": written, "peak": peak}, f"chunks {chunks}: expected written={written}, peak={peak}, got {got}"
        assert preallocated(chunks, len(cache)) == {"written": len(cache), "peak": len(cache)}
