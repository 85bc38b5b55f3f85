import random

from solution import LRUTree

EXAMPLES = ["test_statement_example", "test_parent_becomes_a_leaf"]


def _statement_tree() -> LRUTree:
    t = LRUTree()
    t.add(1, 0, 4, time=1)
    t.add(2, 1, 2, time=2)
    t.add(3, 1, 3, time=3)
    return t


def test_statement_example():
    t = _statement_tree()
    t.lock(3)
    assert t.evictable_tokens() == 2, "lock(3) also locks its parent 1: only node 2 (2 tokens) is free"
    assert t.evict(5) == [2], "nodes 1 and 3 are locked, so only 2 can go"
    t.unlock(3)
    assert t.evictable_tokens() == 7
    assert t.evict(5) == [3, 1], "3 frees 3 tokens (< 5), then 1 is a leaf and goes too"


def test_parent_becomes_a_leaf():
    t = LRUTree()
    t.add(1, 0, 1, time=5)
    t.add(2, 1, 1, time=9)
    t.add(3, 0, 1, time=7)
    # leaves: 2 (t=9), 3 (t=7). 3 goes first; then 2; then 1 (t=5) is a leaf.
    assert t.evict(3) == [3, 2, 1], "an inner node is only a candidate once its children are gone"


def test_stops_as_soon_as_enough_is_freed():
    t = LRUTree()
    for i in range(1, 6):
        t.add(i, 0, 10, time=i)
    assert t.evict(15) == [1, 2], "two leaves of 10 tokens free >= 15: stop there"
    assert t.evict(0) == [], "evict(0) has nothing to do"
    assert t.evict(1) == [3]


def test_access_refreshes_the_whole_path():
    t = LRUTree()
    t.add(1, 0, 1, time=1)
    t.add(2, 1, 1, time=2)
    t.add(3, 0, 1, time=3)
    t.access(2, time=10)  # 2 and 1 now at t=10, 3 is the oldest
    assert t.evict(1) == [3], "access(2) must refresh node 2 and its ancestor 1"
    assert t.evict(1) == [2]


def test_ties_by_node_id():
    t = LRUTree()
    for i in (4, 2, 3):
        t.add(i, 0, 1, time=7)
    assert t.evict(3) == [2, 3, 4], "equal times: the smaller node id goes first"


def test_nested_locks_and_bad_unlock():
    t = _statement_tree()
    t.lock(2)
    t.lock(3)
    assert t.evictable_tokens() == 0
    t.unlock(2)
    assert t.evictable_tokens() == 2, "node 1 is still locked through node 3"
    try:
        t.unlock(2)
    except ValueError:
        pass
    else:
        raise AssertionError("unlocking node 2 a second time must raise ValueError")
    assert t.evictable_tokens() == 2, "a refused unlock must change nothing (node 1 keeps its lock from 3)"
    assert t.evict(100) == [2]


def test_random_against_brute_force():
    rng = random.Random(11)
    for trial in range(40):
        t = LRUTree()
        parent, tokens, times, locks, held = {}, {}, {}, {}, []
        for node in range(1, 25):
            p = rng.choice([0] + list(parent))
            parent[node], tokens[node], times[node], locks[node] = p, rng.randint(1, 5), rng.randint(0, 20), 0
            t.add(node, p, tokens[node], times[node])
        for _ in range(6):
            x = rng.choice(list(parent))
            held.append(x)
            t.lock(x)
            while x:
                locks[x] += 1
                x = parent[x]
        for _ in range(3):
            x, now = rng.choice(list(parent)), rng.randint(0, 30)
            t.access(x, now)
            while x:
                times[x] = now
                x = parent[x]
        want_evictable = sum(tokens[x] for x in parent if locks[x] == 0)
        assert t.evictable_tokens() == want_evictable, f"trial {trial}: evictable_tokens"
        n = rng.randint(1, 60)
        expected, freed = [], 0
        while freed < n:
            leaves = [x for x in parent if locks[x] == 0 and x not in parent.values()]
            if not leaves:
                break
            x = min(leaves, key=lambda v: (times[v], v))
            expected.append(x)
            freed += tokens[x]
            del parent[x]
        got = t.evict(n)
        assert got == expected, f"trial {trial}: evict({n}) returned {got}, brute force says {expected}"
