import copy
import random

from solution import replay

EXAMPLES = ["test_statement_example", "test_buffers_are_written_in_place"]

MAX_BS = 8
KV_SLOTS = 16  # slots 0..15 belong to requests; slot 16 is the padding slot no request owns
PAD = {"ids": 0, "pos": 0, "slot": KV_SLOTS}  # a dummy request: token 0 at position 0, KV to the padding slot
SIZES = [1, 2, 4, 8]


def make_static():
    """The static buffers of a toy decode step, holding padding values as the engine's do at capture."""
    return {"ids": [0] * MAX_BS, "pos": [0] * MAX_BS, "slot": [KV_SLOTS] * MAX_BS,
            "h": [0] * MAX_BS, "logits": [0] * MAX_BS, "kv": [0] * (KV_SLOTS + 1)}


def capture(static, size):
    """Record the toy decode step at `size` rows: ops that hold the static lists themselves (not names)."""
    ids, pos, slot, h, kv, logits = (static[k] for k in ("ids", "pos", "slot", "h", "kv", "logits"))

    def embed():
        for i in range(size):
            h[i] = 3 * ids[i] + pos[i]

    def store_kv():  # each row writes its KV slot, as the attention layer does through out_loc
        for i in range(size):
            kv[slot[i]] = h[i]

    def head():  # reads the cache back; `longest` is batch-wide, like max_seqlen in the attention metadata
        longest = max(pos[:size]) + 1
        for i in range(size):
            logits[i] = 10 * kv[slot[i]] + longest

    ops = [embed, store_kv, head]
    for op in ops:  # capture runs the forward pass once, on the padding values
        op()
    return {"ops": ops, "output": logits}


def eager(ids, pos, slot, cache):
    """Oracle: the same step computed directly on the batch alone (no padding, no buffers); updates `cache`."""
    keys = [3 * a + p for a, p in zip(ids, pos)]
    cache.update(zip(slot, keys))
    return [10 * cache[s] + max(pos) + 1 for s in slot]


def _raises(*args):
    """True if replay(*args) raises ValueError, False if it returns; other exceptions fail the test."""
    try:
        replay(*args)
    except ValueError:
        return True
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"replay raised {type(e).__name__}: {e}; expected ValueError") from e
    return False


def buffers(static):
    """What must survive a replay: each static list object, and its length."""
    return {name: (lst, len(lst)) for name, lst in static.items()}


def check_same_lists(static, before, what):
    for name, (lst, length) in before.items():
        assert static[name] is lst, (f"{what}: static[{name!r}] is a new list; the graph's ops still hold the old "
                                     "one (a graph reads the memory it was captured with): write into it instead")
        assert len(lst) == length, f"{what}: static[{name!r}] has {len(lst)} rows, it had {length}"


def test_statement_example():
    static = {"x": [0.0] * 4, "out": [0.0] * 4}
    x, out = static["x"], static["out"]

    def op():
        total = x[0] + x[1] + x[2]
        for i in range(3):
            out[i] = 2 * x[i] + total

    graph = {"ops": [op], "output": out}
    got = replay(graph, static, {"x": [5.0, 1.0, 2.0]}, 3, {"x": 0.0})
    check_same_lists(static, {"x": (x, 4), "out": (out, 4)}, "a full batch of 3")
    assert got == [18.0, 10.0, 12.0], f"a full batch of 3: got {got}, expected [18.0, 10.0, 12.0]"
    got = replay(graph, static, {"x": [5.0, 1.0]}, 3, {"x": 0.0})
    assert got == [16.0, 8.0], (f"a batch of 2 on the graph of 3: got {got}, expected [16.0, 8.0]"
                                + (" (row 2 still holds the previous batch's 2.0: fill it with padding)"
                                   if got == [18.0, 10.0] else ""))
    assert static["x"] is x and x == [5.0, 1.0, 0.0, 0.0], f"x should be the same list, [5.0, 1.0, 0.0, 0.0]: {static['x']}"


def test_buffers_are_written_in_place():
    static = make_static()
    graphs = {s: capture(static, s) for s in SIZES}
    before = buffers(static)
    for name in ("ids", "pos", "slot"):
        static[name][4:] = [-7] * 4  # rows past the graph's size: must stay as they are
    got = replay(graphs[4], static, {"ids": [5, 6, 7], "pos": [1, 4, 2], "slot": [3, 8, 0]}, 4, PAD)
    check_same_lists(static, before, "after a batch of 3 on the graph of 4")
    want = eager([5, 6, 7], [1, 4, 2], [3, 8, 0], {})
    assert got == want, f"a batch of 3 on the graph of 4: got {got}, expected {want}"
    assert static["ids"] == [5, 6, 7, 0, -7, -7, -7, -7], f"ids rows 0..3 are the batch then padding, later rows untouched: {static['ids']}"
    assert static["slot"] == [3, 8, 0, KV_SLOTS, -7, -7, -7, -7], f"slot rows: {static['slot']}"
    assert got is not graphs[4]["output"], "return a new list, not the output buffer the next replay overwrites"
    kept = list(got)
    replay(graphs[2], static, {"ids": [9, 9], "pos": [1, 1], "slot": [5, 6]}, 2, PAD)
    assert got == kept, "the list returned by one replay changed when the next replay ran: return a copy"
    check_same_lists(static, before, "after a second replay")


def test_stale_padding_rows_from_a_larger_batch():
    static = make_static()
    graphs = {s: capture(static, s) for s in SIZES}
    cache = {}
    got = replay(graphs[4], static, {"ids": [7, 8, 9, 10], "pos": [9, 3, 5, 7], "slot": [0, 1, 2, 3]}, 4, PAD)
    assert got == eager([7, 8, 9, 10], [9, 3, 5, 7], [0, 1, 2, 3], cache), f"four requests, no padding: got {got}"
    # Request 1 finished and its slot 1 went to a new request, now alone in the batch: the graph of size 2 pads it.
    got = replay(graphs[2], static, {"ids": [4], "pos": [2], "slot": [1]}, 2, PAD)
    want = eager([4], [2], [1], cache)
    assert static["slot"][1] == KV_SLOTS, (f"row 1 of slot holds {static['slot'][1]} (the previous batch's); the dummy row "
                                           f"must write to the padding slot {KV_SLOTS}")
    assert static["kv"][1] == 14, (f"kv[1] is {static['kv'][1]}, expected 14: the dummy row overwrote the KV of "
                                   "the request that owns slot 1 now")
    assert static["pos"][1] == 0, f"row 1 of pos holds {static['pos'][1]}, not the padding position 0"
    assert got == want, f"one request on the graph of 2: got {got}, expected {want}"


def test_full_batches_need_no_padding():
    static = make_static()
    graphs = {s: capture(static, s) for s in SIZES}
    cache = {}
    for size in (8, 1, 2, 4):
        ids, pos, slot = list(range(size)), [size + i for i in range(size)], list(range(15, 15 - size, -1))
        got = replay(graphs[size], static, {"ids": ids, "pos": pos, "slot": slot}, size, PAD)
        want = eager(ids, pos, slot, cache)
        assert got == want, f"a full batch of {size}: got {got}, expected {want}"


def test_bad_input_is_refused_before_any_change():
    static = make_static()
    graphs = {s: capture(static, s) for s in SIZES}
    replay(graphs[4], static, {"ids": [1, 2, 3], "pos": [4, 5, 6], "slot": [7, 8, 9]}, 4, PAD)
    snapshot, before = copy.deepcopy(static), buffers(static)
    ok = {"ids": [1, 2], "pos": [3, 4], "slot": [5, 6]}
    cases = [
        ({}, 4, {}, "no inputs at all"),
        (ok, 4, {"ids": 0, "pos": 0}, "padding misses 'slot'"),
        (dict(ok, extra=[1, 2]), 4, dict(PAD, extra=0), "'extra' is not a static buffer"),
        ({"ids": [1, 2], "pos": [3, 4], "slot": [5]}, 4, PAD, "input lists of lengths 2, 2 and 1"),
        ({"ids": [], "pos": [], "slot": []}, 4, PAD, "an empty batch"),
        ({"ids": [1] * 5, "pos": [1] * 5, "slot": list(range(5))}, 4, PAD, "5 requests on the graph of 4"),
        ({"ids": [1] * 5, "pos": [1] * 5, "slot": list(range(5))}, 9, PAD, "size 9 but the buffers hold 8 rows"),
    ]
    for inputs, size, padding, what in cases:
        assert _raises(graphs[4], static, inputs, size, padding), f"{what}: ValueError expected"
        assert static == snapshot, f"{what}: the static buffers changed although the call was refused"
        check_same_lists(static, before, what)


def test_random_decode_steps_against_eager():
    rng = random.Random(18)
    for run in range(20):
        static = make_static()
        graphs = {s: capture(static, s) for s in SIZES}
        before = buffers(static)
        cache = {}
        for step in range(25):
            n = rng.randint(1, MAX_BS)
            size = min(s for s in SIZES if s >= n)
            ids = [rng.randrange(100) for _ in range(n)]
            pos = [rng.randrange(60) for _ in range(n)]
            slot = rng.sample(range(KV_SLOTS), n)
            got = replay(graphs[size], static, {"ids": ids, "pos": pos, "slot": slot}, size, PAD)
            want = eager(ids, pos, slot, cache)
            what = f"run {run}, step {step}: {n} requests on the graph of {size}"
            assert got == want, f"{what}: got {got}, expected {want} (ids={ids}, pos={pos}, slot={slot})"
            for s in range(KV_SLOTS):
                assert static["kv"][s] == cache.get(s, 0), (f"{what}: kv[{s}] is {static['kv'][s]}, expected "
                                                            f"{cache.get(s, 0)}: a dummy row wrote outside the padding slot")
            check_same_lists(static, before, what)
