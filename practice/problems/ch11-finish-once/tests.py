import random

from solution import overlap_run

EXAMPLES = ["test_statement_example", "test_single_token_requests"]


def _serial_outputs(max_tokens, next_token, eos):
    """The loop without overlap: results are processed right after each launch."""
    outputs, finish_order, done = [[] for _ in max_tokens], [], set()
    while len(done) < len(max_tokens):
        for rid in range(len(max_tokens)):
            if rid in done:
                continue
            tok = next_token(rid, len(outputs[rid]))
            outputs[rid].append(tok)
            if tok == eos or len(outputs[rid]) >= max_tokens[rid]:
                done.add(rid)
                finish_order.append(rid)
    return outputs, finish_order


def test_statement_example():
    toks = {0: [5, 6, 7], 1: [9, 2, 8]}
    out = overlap_run([3, 3], lambda rid, k: toks[rid][k] if k < 3 else 0, eos=2)
    assert out["outputs"] == [[5, 6, 7], [9, 2]], f"outputs {out['outputs']}: eos is kept, nothing after it"
    assert out["batches"] == [[0, 1], [0, 1], [0, 1], [0]], f"batches {out['batches']}"
    assert out["freed"] == [1, 0], f"freed {out['freed']}"
    assert out["discarded"] == [(2, 1), (3, 0)], f"discarded {out['discarded']}"


def test_single_token_requests():
    out = overlap_run([1, 1], lambda rid, k: 10 + k, eos=-1)
    assert out["outputs"] == [[10], [10]], f"max_tokens=1: one token each, the extra launch is discarded; got {out['outputs']}"
    assert out["batches"] == [[0, 1], [0, 1]], \
        "batch 1 is scheduled before batch 0's results are known, so both requests run again"
    assert out["freed"] == [0, 1], f"each request is freed exactly once, got {out['freed']}"
    assert out["discarded"] == [(1, 0), (1, 1)]


def test_no_requests():
    assert overlap_run([], lambda rid, k: 0, eos=0) == {"outputs": [], "freed": [], "discarded": [], "batches": []}


def test_invalid_max_tokens():
    try:
        overlap_run([2, 0], lambda rid, k: 1, eos=0)
    except ValueError:
        return
    raise AssertionError("max_tokens of 0 should raise ValueError")


def test_eos_on_first_token():
    out = overlap_run([5, 3], lambda rid, k: 0 if rid == 0 else 4, eos=0)
    assert out["outputs"] == [[0], [4, 4, 4]], f"request 0 stops at its eos token; got {out['outputs']}"
    assert out["freed"] == [0, 1], f"got {out['freed']}"
    assert out["freed"].count(0) == 1, "request 0 must not be freed again when its extra token arrives"


def test_random_properties_and_serial_oracle():
    rng = random.Random(31)
    for trial in range(60):
        n = rng.randint(1, 6)
        max_tokens = [rng.randint(1, 7) for _ in range(n)]
        table = {(r, k): rng.randint(0, 5) for r in range(n) for k in range(20)}
        eos = 0

        def next_token(rid, k):
            return table[(rid, k)]

        out = overlap_run(max_tokens, next_token, eos)
        want_outputs, want_freed = _serial_outputs(max_tokens, next_token, eos)
        assert out["outputs"] == want_outputs, \
            f"trial {trial}: outputs {out['outputs']} differ from the serial loop's {want_outputs}"
        assert out["freed"] == want_freed, f"trial {trial}: freed {out['freed']}, expected {want_freed}"
        assert sorted(out["freed"]) == list(range(n)), f"trial {trial}: every request freed exactly once"
        for rid in range(n):
            runs = sum(rid in b for b in out["batches"])
            assert runs == len(want_outputs[rid]) + 1, \
                f"trial {trial}: request {rid} should be launched once more than it has tokens, got {runs}"
        assert sorted(r for _, r in out["discarded"]) == list(range(n)), \
            f"trial {trial}: each request wastes exactly one slot, discarded = {out['discarded']}"
        for step, rid in out["discarded"]:
            assert rid in out["batches"][step], f"trial {trial}: discarded {(step, rid)} was not in that batch"
