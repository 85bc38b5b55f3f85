import random

from solution import RadixTree

EXAMPLES = ["test_statement_example", "test_split_when_ending_inside_an_edge"]


def _brute_match(stored: list[list[int]], tokens: list[int]) -> int:
    best = 0
    for seq in stored:
        n = 0
        while n < len(seq) and n < len(tokens) and seq[n] == tokens[n]:
            n += 1
        best = max(best, n)
    return best


def _brute_shape(stored: list[list[int]]) -> tuple[int, int]:
    """(nodes, tokens) of the radix tree holding `stored`, from the set of all prefixes."""
    prefixes = {tuple(s[:i]) for s in stored for i in range(1, len(s) + 1)}
    ends = {tuple(s) for s in stored if s}
    nexts: dict[tuple, set] = {}
    for p in prefixes:
        nexts.setdefault(p[:-1], set()).add(p[-1])
    nodes = sum(1 for p in prefixes if p in ends or len(nexts.get(p, ())) >= 2)
    return nodes, len(prefixes)


def test_statement_example():
    t = RadixTree()
    assert t.insert([1, 2, 3, 4]) == 0, "nothing was stored before the first insert"
    assert t.insert([1, 2, 5]) == 2, "[1, 2] was already there"
    assert t.match([1, 2, 3, 9]) == 3
    assert t.match([7]) == 0
    assert t.insert([1, 2]) == 2
    assert (t.num_nodes(), t.num_tokens()) == (3, 5), \
        f"root -> [1,2] -> {{[3,4], [5]}} has 3 nodes and 5 tokens, got {(t.num_nodes(), t.num_tokens())}"


def test_split_when_ending_inside_an_edge():
    t = RadixTree()
    t.insert([1, 2, 3, 4])
    assert t.insert([1, 2, 3]) == 3
    assert (t.num_nodes(), t.num_tokens()) == (2, 4), \
        f"[1,2,3,4] then [1,2,3] must split into [1,2,3] -> [4]: want (2, 4), got {(t.num_nodes(), t.num_tokens())}"
    assert t.match([1, 2, 3, 4, 5]) == 4


def test_empty_tree_and_empty_inputs():
    t = RadixTree()
    assert t.match([1, 2]) == 0 and t.match([]) == 0
    assert t.insert([]) == 0
    assert (t.num_nodes(), t.num_tokens()) == (0, 0), "inserting [] must not create a node"
    t.insert([5])
    assert t.match([]) == 0


def test_match_does_not_change_the_tree():
    t = RadixTree()
    t.insert([1, 2, 3, 4, 5])
    for q in ([1, 2], [1, 2, 9], [1, 2, 3, 4, 5, 6], [3]):
        t.match(q)
    assert (t.num_nodes(), t.num_tokens()) == (1, 5), "match must only measure, never split"


def test_reinsert_is_a_no_op():
    t = RadixTree()
    t.insert([4, 4, 4])
    t.insert([4, 4, 5])
    shape = (t.num_nodes(), t.num_tokens())
    assert t.insert([4, 4, 5]) == 3 and t.insert([4, 4, 4]) == 3
    assert (t.num_nodes(), t.num_tokens()) == shape, "inserting a stored sequence again must change nothing"


def test_extend_a_leaf():
    t = RadixTree()
    t.insert([1, 2])
    assert t.insert([1, 2, 3, 4]) == 2
    assert (t.num_nodes(), t.num_tokens()) == (2, 4), "[1,2] stays a node, [3,4] hangs below it"


def test_random_against_brute_force():
    rng = random.Random(9)
    for trial in range(30):
        t, stored = RadixTree(), []
        for _ in range(25):
            seq = [rng.randint(0, 2) for _ in range(rng.randint(0, 8))]
            if stored and rng.random() < 0.5:  # share a prefix with an earlier sequence
                base = rng.choice(stored)
                seq = base[: rng.randint(0, len(base))] + seq[: rng.randint(0, 3)]
            want = _brute_match(stored, seq)
            got = t.insert(seq)
            assert got == want, f"trial {trial}: insert({seq}) returned {got}, brute force says {want}"
            stored.append(seq)
            q = [rng.randint(0, 2) for _ in range(rng.randint(0, 9))]
            assert t.match(q) == _brute_match(stored, q), f"trial {trial}: match({q}) after storing {stored}"
        got_shape = (t.num_nodes(), t.num_tokens())
        assert got_shape == _brute_shape(stored), \
            f"trial {trial}: (nodes, tokens) = {got_shape}, expected {_brute_shape(stored)} for {stored}"
