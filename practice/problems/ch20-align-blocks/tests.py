import random

from solution import align_blocks

EXAMPLES = ["test_three_experts", "test_padding", "test_unused_expert_takes_no_room"]


def test_three_experts():
    assert align_blocks([[2, 0], [0, 1], [2, 1]], 3, 2) == ([1, 2, 3, 5, 0, 4], [0, 1, 2])


def test_padding():
    assert align_blocks([[1], [1], [1]], 2, 2) == ([0, 1, 2, 3], [1, 1])


def test_unused_expert_takes_no_room():
    assert align_blocks([[0, 3], [3, 0]], 4, 4) == ([0, 3, 4, 4, 1, 2, 4, 4], [0, 3])


def test_block_of_one_is_a_plain_sort():
    ids = [[3, 1], [0, 3], [1, 2]]
    assert align_blocks(ids, 4, 1) == ([2, 1, 4, 5, 0, 3], [0, 1, 1, 2, 3, 3])


def test_bad_input_is_refused():
    for args in [([[0, 4]], 4, 2), ([[-1]], 4, 2), ([[0]], 4, 0)]:
        try:
            align_blocks(*args)
        except ValueError:
            continue
        raise AssertionError(f"align_blocks{args} should raise ValueError")


def test_random_layouts_keep_their_promises():
    rng = random.Random(20)
    for _ in range(300):
        experts, top_k, block = rng.randint(1, 9), rng.randint(1, 3), rng.randint(1, 5)
        top_k = min(top_k, experts)
        ids = [rng.sample(range(experts), top_k) for _ in range(rng.randint(0, 12))]
        n = len(ids) * top_k
        layout, owners = align_blocks(ids, experts, block)
        flat = [e for row in ids for e in row]
        assert len(layout) % block == 0 and len(owners) == len(layout) // block, "whole blocks, one expert each"
        assert len(layout) <= n + experts * (block - 1), "no more padding than block - 1 per expert"
        assert sorted(x for x in layout if x != n) == list(range(n)), "every entry exactly once"
        assert owners == sorted(owners), "experts in increasing order"
        for b, e in enumerate(owners):
            rows = layout[b * block:(b + 1) * block]
            real = [x for x in rows if x != n]
            assert all(flat[x] == e for x in real), f"block {b} of expert {e} holds entries {real}"
            assert real, f"block {b} is all padding"
        for e in range(experts):
            mine = [x for b, o in enumerate(owners) if o == e for x in layout[b * block:(b + 1) * block] if x != n]
            assert mine == [i for i, v in enumerate(flat) if v == e], f"expert {e}: entries in increasing order"
