import itertools
from fractions import Fraction

from solution import expected_experts, expected_weight_bytes

EXAMPLES = ["test_two_experts_two_tokens", "test_one_token", "test_every_expert_every_time"]


def test_two_experts_two_tokens():
    assert expected_experts(2, 1, 2) == Fraction(3, 2)


def test_one_token():
    assert expected_experts(128, 8, 1) == 8


def test_every_expert_every_time():
    assert expected_experts(4, 4, 5) == 4


def test_no_tokens_no_experts():
    assert expected_experts(8, 2, 0) == 0


def test_bytes():
    assert expected_weight_bytes(2, 1, 2, 100) == 150


def test_bad_input_is_refused():
    for args in [(4, 0, 1), (4, 5, 1), (4, 2, -1)]:
        try:
            expected_experts(*args)
        except ValueError:
            continue
        raise AssertionError(f"expected_experts{args} should raise ValueError")


def brute(E, k, T):
    # Every way T tokens can each pick a k-subset, all equally likely: the exact average of experts used.
    sets = list(itertools.combinations(range(E), k))
    total = count = 0
    for choice in itertools.product(sets, repeat=T):
        total += len(set().union(*choice)) if T else 0
        count += 1
    return Fraction(total, count)


def test_small_cases_against_enumeration():
    for E in range(1, 6):
        for k in range(1, E + 1):
            for T in range(0, 4):
                assert expected_experts(E, k, T) == brute(E, k, T), f"E={E}, k={k}, T={T}"


def test_never_more_than_all_experts_and_grows_with_the_batch():
    prev = Fraction(0)
    for T in range(0, 200, 7):
        now = expected_experts(128, 8, T)
        assert prev <= now <= 128, f"T={T}: {now}"
        prev = now
