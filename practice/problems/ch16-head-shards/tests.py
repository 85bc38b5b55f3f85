from solution import head_shards

EXAMPLES = ["test_two_ranks", "test_replicated_kv", "test_uneven_is_refused"]


def test_two_ranks():
    assert head_shards(4, 2, 2) == [([0, 1], [0]), ([2, 3], [1])]


def test_replicated_kv():
    assert head_shards(8, 2, 4) == [([0, 1], [0]), ([2, 3], [0]), ([4, 5], [1]), ([6, 7], [1])]


def test_uneven_is_refused():
    for args in [(9, 3, 2), (8, 3, 4), (12, 6, 4), (4, 2, 0), (6, 4, 2)]:
        try:
            head_shards(*args)
        except ValueError:
            continue
        raise AssertionError(f"head_shards{args} should raise ValueError")


def test_one_rank_holds_everything():
    assert head_shards(6, 3, 1) == [([0, 1, 2, 3, 4, 5], [0, 1, 2])]


def test_every_query_head_finds_its_kv_head_on_its_rank():
    # Brute force over many shapes: each query head appears on exactly one rank, and that rank holds the KV
    # head the query head attends with.
    for num_kv in range(1, 9):
        for group in range(1, 5):
            num_q = num_kv * group
            for tp in range(1, 17):
                try:
                    shards = head_shards(num_q, num_kv, tp)
                except ValueError:
                    assert num_q % tp or (num_kv >= tp and num_kv % tp) or (num_kv < tp and tp % num_kv), \
                        f"head_shards({num_q}, {num_kv}, {tp}) refused a valid split"
                    continue
                held = sorted(h for q, _ in shards for h in q)
                assert held == list(range(num_q)), f"({num_q}, {num_kv}, {tp}): query heads {held}"
                for r, (q, kv) in enumerate(shards):
                    for h in q:
                        assert h // group in kv, f"({num_q}, {num_kv}, {tp}): rank {r} holds q head {h} without KV head {h // group}"
                    assert len({len(k) for _, k in shards}) == 1, "every rank holds as many KV heads"
