import random

from solution import ring_allreduce

EXAMPLES = ["test_two_ranks", "test_three_ranks"]


def test_two_ranks():
    assert ring_allreduce([[1, 2], [10, 20]]) == ([[11, 22], [11, 22]], [2, 2])


def test_three_ranks():
    result, sent = ring_allreduce([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    assert result == [[12, 15, 18]] * 3, f"every rank holds the sum, got {result}"
    assert sent == [4, 4, 4], f"each rank sends 2 * (n - 1) chunks of one element, got {sent}"


def test_single_rank_sends_nothing():
    assert ring_allreduce([[4, 5, 6]]) == ([[4, 5, 6]], [0])


def test_uneven_chunks():
    # 5 elements over 3 ranks: chunks of 2, 2, 1. Rank r sends chunks (r - s) % 3 and (r + 1 - s) % 3.
    result, sent = ring_allreduce([[1, 1, 1, 1, 1], [2, 2, 2, 2, 2], [3, 3, 3, 3, 3]])
    assert result == [[6] * 5] * 3
    assert sent == [2 + 1 + 2 + 2, 2 + 2 + 1 + 2, 1 + 2 + 2 + 1], f"got {sent}"


def test_more_ranks_than_elements():
    result, sent = ring_allreduce([[1, 2], [3, 4], [5, 6], [7, 8]])
    assert result == [[16, 20]] * 4, f"got {result}"
    assert sum(sent) == 2 * 3 * 2, "every element travels 2 * (n - 1) times in total"


def test_random_against_the_sum():
    rng = random.Random(16)
    for _ in range(50):
        n, m = rng.randint(1, 7), rng.randint(1, 12)
        vectors = [[rng.randint(-50, 50) for _ in range(m)] for _ in range(n)]
        result, sent = ring_allreduce(vectors)
        total = [sum(col) for col in zip(*vectors)]
        assert result == [total] * n, f"n={n}, m={m}: not the element-wise sum on every rank"
        assert sum(sent) == 2 * (n - 1) * m, f"n={n}, m={m}: {sent} elements sent"


def test_bad_input():
    for bad in ([], [[1, 2], [3]]):
        try:
            ring_allreduce(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} should raise ValueError")
