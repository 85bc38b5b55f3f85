import random

from solution import kv_bytes_per_token, num_kv_pages

EXAMPLES = ["test_statement_example"]


def test_statement_example():
    per_token = kv_bytes_per_token(28, 8, 128, 2)
    assert per_token == 114688, f"2 * 28 * 8 * 128 * 2 = 114688 (K and V!), got {per_token}"
    pages = num_kv_pages(2**30, 114688, 16, 8, 4096)
    assert pages == 585, f"2**30 // (114688 * 16) = 585, below the cap of 2048; got {pages}"


def test_bytes_per_token_counts_keys_and_values():
    got = kv_bytes_per_token(1, 1, 1, 1)
    assert got == 2, f"one layer, one head, one dim, one byte: a key and a value = 2 bytes, got {got}"
    got = kv_bytes_per_token(32, 8, 128, 4)
    assert got == 262144, f"float32, 32 layers, 8 KV heads, head_dim 128: expected 262144, got {got}"


def test_cap_by_the_page_table():
    got = num_kv_pages(10**12, 1000, 16, 4, 100)
    assert got == 25, f"a huge budget is capped at ceil(4 * 100 / 16) = 25 pages, got {got}"
    got = num_kv_pages(10**12, 1000, 16, 1, 17)
    assert got == 2, f"17 tokens need 2 pages of 16 (round the cap up), got {got}"


def test_budget_rounds_down_to_whole_pages():
    got = num_kv_pages(3 * 160 - 1, 10, 16, 100, 1000)
    assert got == 2, f"one page is 160 bytes; 479 bytes hold 2 whole pages, got {got}"
    got = num_kv_pages(160, 10, 16, 100, 1000)
    assert got == 1, f"exactly one page fits, got {got}"


def test_no_page_fits():
    for args in ((159, 10, 16, 100, 1000), (0, 10, 1, 1, 1)):
        try:
            num_kv_pages(*args)
        except ValueError:
            continue
        raise AssertionError(f"num_kv_pages{args} should raise ValueError: not one page fits")


def test_random_against_a_page_by_page_count():
    rng = random.Random(60)
    for _ in range(200):
        bpt, page = rng.randint(1, 50), rng.choice([1, 2, 4, 16, 32])
        reqs, seq = rng.randint(1, 6), rng.randint(1, 70)
        budget = rng.randint(bpt * page, bpt * page * 40)
        # brute force: add pages one by one while the next still fits and is still addressable
        want, used = 0, 0
        while used + bpt * page <= budget and want * page < reqs * seq:
            want, used = want + 1, used + bpt * page
        got = num_kv_pages(budget, bpt, page, reqs, seq)
        assert got == want, (f"num_kv_pages({budget}, {bpt}, {page}, {reqs}, {seq}): expected {want}, got {got}")
