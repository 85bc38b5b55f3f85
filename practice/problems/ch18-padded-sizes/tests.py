import itertools
import random

from solution import best_sizes, plan_padding

EXAMPLES = ["test_statement_example", "test_bad_input_is_refused"]
HIST = {1: 6, 2: 6, 4: 3, 8: 1}


def _raises(fn, *args):
    """True if fn(*args) raises ValueError, False if it returns; other exceptions fail the test."""
    try:
        fn(*args)
    except ValueError:
        return True
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"{fn.__name__}{args!r} raised {type(e).__name__}: {e}; expected ValueError") from e
    return False


def oracle_plan(sizes, batches):
    """Independent plan: scan the sizes for the first that fits, one batch at a time."""
    padded = [next((s for s in sizes if s >= n), None) for n in batches]
    return padded, sum(p - n for p, n in zip(padded, batches) if p is not None)


def padding_cost(chosen, histogram):
    """Total dummy rows of a choice of capture sizes over a histogram (None if some size would run eagerly)."""
    total = 0
    for n, count in histogram.items():
        fits = [s for s in chosen if s >= n]
        if not fits:
            return None
        total += count * (min(fits) - n)
    return total


def brute_force(histogram, k):
    """Least padding over every subset of observed sizes that holds the largest and has at most k sizes."""
    top = max(histogram)
    rest = sorted(n for n in histogram if n != top)
    return min(padding_cost(list(extra) + [top], histogram)
               for r in range(min(k, len(rest) + 1)) for extra in itertools.combinations(rest, r))


def top_down(histogram, k):
    """Least padding, written as a memoised recursion from the largest size down (no subsets: fast)."""
    xs = sorted(histogram)
    memo = {}

    def least(j, left):  # xs[j] is captured; cover xs[0..j-1] with at most `left` more sizes below it
        if (j, left) not in memo:
            below = 0  # dummy rows if xs[i+1 .. j-1] all pad up to xs[j]
            best = None
            for i in range(j - 1, -2, -1):  # i: the next captured size below xs[j] (-1: none)
                if i == -1 or left > 0:
                    cand = below + (least(i, left - 1) if i >= 0 else 0)
                    best = cand if best is None else min(best, cand)
                if i >= 0:
                    below += histogram[xs[i]] * (xs[j] - xs[i])
            memo[(j, left)] = best
        return memo[(j, left)]

    return least(len(xs) - 1, k - 1)


def check_choice(got, histogram, k, want_cost, what):
    assert isinstance(got, list), f"{what}: expected a list of sizes, got {type(got).__name__}"
    assert got == sorted(set(got)), f"{what}: {got} is not sorted without repeats"
    assert all(isinstance(s, int) and s >= 1 for s in got), f"{what}: {got} holds a size that is not an int >= 1"
    assert len(got) <= k, f"{what}: {len(got)} sizes {got}, but only k = {k} may be captured"
    assert max(histogram) in got, f"{what}: {got} misses the largest observed size {max(histogram)}, which would run eagerly"
    cost = padding_cost(got, histogram)
    assert cost == want_cost, f"{what}: {got} pads {cost} dummy rows, the best choice pads {want_cost}"


def test_statement_example():
    got = plan_padding([1, 2, 4, 8], [3, 1, 8, 5, 9])
    assert got == ([4, 1, 8, 8, None], 4), f"got {got}, expected ([4, 1, 8, 8, None], 4)"
    for k, want, cost in [(2, [2, 8], 18), (3, [2, 4, 8], 6), (1, [8], 90)]:
        got = best_sizes(dict(HIST), k)
        assert got == want, f"best_sizes({HIST}, {k}) = {got}, expected {want} ({cost} dummy rows)"


def test_bad_input_is_refused():
    assert _raises(plan_padding, [], [1]), "no captured sizes: ValueError expected"
    assert _raises(plan_padding, [4, 2, 8], [1]), "sizes not ascending: ValueError expected"
    assert _raises(plan_padding, [2, 2, 8], [1]), "a repeated size: ValueError expected"
    assert _raises(plan_padding, [0, 2], [1]), "a captured size of 0: ValueError expected"
    assert _raises(plan_padding, [1, 2], [1, 0]), "a batch of 0 requests: ValueError expected"
    assert _raises(plan_padding, [1, 2], [-3]), "a batch of -3 requests: ValueError expected"
    assert _raises(best_sizes, dict(HIST), 0), "k = 0: ValueError expected"
    assert _raises(best_sizes, {}, 3), "empty histogram: ValueError expected"
    assert _raises(best_sizes, {0: 4, 2: 1}, 2), "batch size 0 in the histogram: ValueError expected"
    assert _raises(best_sizes, {1: 4, 2: 0}, 2), "count 0 in the histogram: ValueError expected"
    assert _raises(best_sizes, {1: 4, 2: -1}, 2), "negative count in the histogram: ValueError expected"


def test_exact_fits_eager_batches_and_an_empty_run():
    got = plan_padding([1, 2, 4, 8], [8, 4, 2, 1])
    assert got == ([8, 4, 2, 1], 0), f"captured sizes need no padding: got {got}"
    got = plan_padding([2, 4], [5, 100, 7])
    assert got == ([None, None, None], 0), f"every batch is above 4 and runs eagerly, unpadded: got {got}"
    got = plan_padding([3], [1, 2, 3, 4])
    assert got == ([3, 3, 3, None], 3), f"one captured size: got {got}"
    assert plan_padding([1, 2], []) == ([], 0), "a run with no decode batches"


def test_plans_for_the_chapter_capture_sizes():
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + [256]  # what capture_sizes(256) returns
    batches = list(range(1, 300))
    got_padded, got_dummy = plan_padding(sizes, batches)
    want_padded, want_dummy = oracle_plan(sizes, batches)
    for n, g, w in zip(batches, got_padded, want_padded):
        assert g == w, f"capture_sizes(256): batch {n} should pad to {w}, got {g}"
    assert got_dummy == want_dummy, f"dummy rows: got {got_dummy}, expected {want_dummy}"


def test_random_plans_against_an_oracle():
    rng = random.Random(18)
    for trial in range(300):
        sizes = sorted(rng.sample(range(1, 80), rng.randint(1, 10)))
        batches = [rng.randint(1, 90) for _ in range(rng.randint(0, 30))]
        got, want = plan_padding(sizes, batches), oracle_plan(sizes, batches)
        assert got == want, f"trial {trial}: plan_padding({sizes}, {batches}) = {got}, expected {want}"


def test_best_sizes_small_cases():
    assert best_sizes({5: 3}, 1) == [5], "one observed size: capture it"
    assert best_sizes({5: 3}, 4) == [5], "k larger than needed: still only the one observed size"
    hist = {3: 2, 7: 1, 10: 4}
    check_choice(best_sizes(hist, 3), hist, 3, 0, f"best_sizes({hist}, 3)")
    check_choice(best_sizes(hist, 10), hist, 10, 0, f"best_sizes({hist}, 10): enough sizes for every one")
    check_choice(best_sizes(hist, 1), hist, 1, 2 * 7 + 3, f"best_sizes({hist}, 1): only the largest")
    hist = {1: 100, 64: 1}
    check_choice(best_sizes(hist, 2), hist, 2, 0, f"best_sizes({hist}, 2): a rare large batch still needs its size")


def test_best_sizes_against_brute_force():
    rng = random.Random(1818)
    for trial in range(250):
        observed = rng.sample(range(1, 40), rng.randint(1, 8))
        hist = {n: rng.choice([1, 1, 2, 5, 20, 100]) for n in observed}
        k = rng.randint(1, 6)
        want = brute_force(hist, k)
        assert top_down(hist, k) == want, f"test oracles disagree on {hist}, k={k}"  # guards the fast oracle
        check_choice(best_sizes(dict(hist), k), hist, k, want, f"trial {trial}: best_sizes({hist}, {k})")


def test_best_sizes_is_fast_enough():
    rng = random.Random(256)
    for trial in range(3):
        observed = rng.sample(range(1, 257), 60)
        hist = {n: rng.randint(1, 50) for n in observed}
        k = 10
        check_choice(best_sizes(dict(hist), k), hist, k, top_down(hist, k),
                     f"trial {trial}: 60 observed sizes up to 256, k = 10 (every subset is ~10^11 choices)")
    # every size 1..m once, k = 2: capturing t and m pads t(t-1)/2 + (m-t)(m-t-1)/2, least at t = m // 2
    m = 60
    hist = {n: 1 for n in range(1, m + 1)}
    t = m // 2
    check_choice(best_sizes(hist, 2), hist, 2, t * (t - 1) // 2 + (m - t) * (m - t - 1) // 2,
                 "sizes 1..60 once each, k = 2")
