import random

from solution import norm_traffic

EXAMPLES = ["test_statement_examples", "test_float32_skips_the_casts"]


class Traced:
    """Oracle: a tensor that only knows its element count and size, and a log of the kernels run on it."""

    log = []

    def __init__(self, numel, itemsize):
        self.numel, self.itemsize = numel, itemsize

    @property
    def nbytes(self):
        return self.numel * self.itemsize

    @classmethod
    def kernel(cls, inputs, numel, itemsize):
        out = cls(numel, itemsize)
        cls.log.append(sum(t.nbytes for t in inputs) + out.nbytes)
        return out


def oracle(tokens, hidden, s, residual, fused):
    """Replays Hugging Face's RMSNorm op by op on Traced tensors (or the fused kernel's loads and stores)."""
    Traced.log = []
    x, r, w = Traced(tokens * hidden, s), Traced(tokens * hidden, s), Traced(hidden, s)
    if fused:
        reads = x.nbytes + w.nbytes + (r.nbytes if residual else 0)
        writes = x.nbytes * (2 if residual else 1)
        return reads + writes, 1
    h = Traced.kernel([x, r], x.numel, s) if residual else x
    h32 = Traced.kernel([h], h.numel, 4) if s != 4 else h
    sq = Traced.kernel([h32], h32.numel, 4)
    var = Traced.kernel([sq], tokens, 4)
    var = Traced.kernel([var], tokens, 4)
    rs = Traced.kernel([var], tokens, 4)
    y32 = Traced.kernel([h32, rs], h32.numel, 4)
    y = Traced.kernel([y32], y32.numel, s) if s != 4 else y32
    Traced.kernel([w, y], y.numel, s)
    return sum(Traced.log), len(Traced.log)


def _check(tokens, hidden, s, residual, fused):
    got = norm_traffic(tokens, hidden, s, residual=residual, fused=fused)
    want = oracle(tokens, hidden, s, residual, fused)
    assert isinstance(got, tuple) and len(got) == 2, f"expected (bytes, launches), got {got!r}"
    assert tuple(got) == want, (f"norm_traffic({tokens}, {hidden}, {s}, residual={residual}, fused={fused}) "
                                f"= {got}, expected {want}")


def test_statement_examples():
    assert norm_traffic(256, 1024, 2, residual=True, fused=False) == (11018240, 9)
    assert norm_traffic(256, 1024, 2, residual=True, fused=True) == (2099200, 1)
    assert norm_traffic(1, 8, 4, residual=False, fused=False) == (280, 6)


def test_float32_skips_the_casts():
    _check(4, 128, 4, residual=True, fused=False)
    assert norm_traffic(4, 128, 4, residual=True, fused=False)[1] == 7, "float32: no .float() and no .to() kernels"
    assert norm_traffic(4, 128, 2, residual=True, fused=False)[1] == 9


def test_without_a_residual():
    _check(3, 576, 2, residual=False, fused=False)
    _check(3, 576, 2, residual=False, fused=True)
    assert norm_traffic(3, 576, 2, residual=False, fused=True) == (3 * 576 * 2 * 2 + 576 * 2, 1)


def test_fused_moves_far_less():
    for s in (2, 4):
        unfused, _ = norm_traffic(256, 1024, s, residual=True, fused=False)
        fused, _ = norm_traffic(256, 1024, s, residual=True, fused=True)
        assert unfused > 2 * fused, f"dtype of {s} bytes: {unfused} bytes unfused vs {fused} fused"


def test_bad_input_is_refused():
    for args in [(0, 8, 2), (4, 0, 2), (4, 8, 1), (4, 8, 8), (-1, 8, 4)]:
        try:
            norm_traffic(*args, residual=True, fused=False)
        except ValueError:
            continue
        raise AssertionError(f"norm_traffic{args} should raise ValueError")


def test_random_shapes_match_an_op_by_op_replay():
    rng = random.Random(1919)
    for _ in range(300):
        _check(rng.randint(1, 4096), rng.choice([1, 7, 64, 128, 576, 1024, 2048, 4096, 5120]), rng.choice([2, 4]),
               rng.random() < 0.5, rng.random() < 0.5)
