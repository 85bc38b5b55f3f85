from solution import flatten

EXAMPLES = ["test_statement_example", "test_single_fresh_request"]


def test_statement_example():
    assert flatten([(0, 3), (2, 4)]) == {"cu_seqlens_q": [0, 3, 5], "cu_seqlens_k": [0, 3, 7],
                                         "positions": [0, 1, 2, 2, 3], "last_indices": [2, 4]}


def test_single_fresh_request():
    out = flatten([(0, 4)])
    assert out["cu_seqlens_q"] == [0, 4] and out["positions"] == [0, 1, 2, 3] and out["last_indices"] == [3]


def test_decode_batch_has_one_token_per_request():
    out = flatten([(6, 7), (2, 3), (10, 11)])
    assert out["cu_seqlens_q"] == [0, 1, 2, 3], "decode: one new token each"
    assert out["positions"] == [6, 2, 10], "a decode token sits at position cached_len"
    assert out["cu_seqlens_k"] == [0, 7, 10, 21]
    assert out["last_indices"] == [0, 1, 2]


def test_empty_batch():
    assert flatten([]) == {"cu_seqlens_q": [0], "cu_seqlens_k": [0], "positions": [], "last_indices": []}


def test_nothing_to_compute_is_refused():
    for bad in ([(3, 3)], [(0, 2), (5, 4)], [(-1, 2)]):
        try:
            flatten(bad)
        except ValueError:
            continue
        raise AssertionError(f"flatten({bad}) should raise ValueError")


def test_large_batch_matches_a_brute_force():
    reqs = [(i % 5, i % 5 + 1 + i % 3) for i in range(50)]
    out = flatten(reqs)
    flat = [(r, p) for r, (c, d) in enumerate(reqs) for p in range(c, d)]
    assert out["positions"] == [p for _, p in flat]
    assert out["last_indices"] == [max(i for i, (r, _) in enumerate(flat) if r == k) for k in range(50)]
