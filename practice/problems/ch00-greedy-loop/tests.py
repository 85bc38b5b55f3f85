import random

from solution import greedy_generate

EXAMPLES = ["test_statement_example", "test_eos_stops_and_is_kept"]


class CachedModel:
    """A fake cached model: the logits of a token depend on the whole sequence up to it.

    It checks the cache contract: start_pos must equal the number of cached tokens.
    """

    def __init__(self, score, vocab):
        self.score, self.vocab = score, vocab
        self.seq, self.calls = [], []

    def __call__(self, token_ids, start_pos):
        token_ids = list(token_ids)
        self.calls.append((token_ids, start_pos))
        if start_pos == 0:
            self.seq = []
        assert start_pos == len(self.seq), (
            f"model called with start_pos={start_pos} but {len(self.seq)} tokens are cached "
            f"(calls so far: {self.calls})")
        assert token_ids, "model called with no tokens"
        rows = []
        for t in token_ids:
            self.seq.append(t)
            rows.append([self.score(self.seq, v) for v in range(self.vocab)])
        return rows


def next_plus_one(seq, v):
    return 1.0 if v == (seq[-1] + 1) % 5 else 0.0


def hashed(seq, v):
    h = 0
    for t in seq:
        h = (h * 31 + t + 7) % 1000003
    return ((h * 17 + v * 101) % 97) / 97.0


def uncached_greedy(score, vocab, prompt, n, eos):
    """Oracle: recompute from the full sequence every step (no cache, no cursor)."""
    seq, out = list(prompt), []
    while len(out) < n:
        row = [score(seq, v) for v in range(vocab)]
        tok = row.index(max(row))  # first maximum: the smallest id on ties
        out.append(tok)
        seq.append(tok)
        if tok in eos:
            break
    return out


def test_statement_example():
    m = CachedModel(next_plus_one, 5)
    got = greedy_generate(m, [3], 4)
    assert got == [4, 0, 1, 2], f"expected [4, 0, 1, 2], got {got}"
    assert m.calls == [([3], 0), ([4], 1), ([0], 2), ([1], 3)], \
        f"one prefill then one token per step at the right position; calls were {m.calls}"


def test_eos_stops_and_is_kept():
    m = CachedModel(next_plus_one, 5)
    got = greedy_generate(m, [3], 4, eos_ids=[0])
    assert got == [4, 0], f"stop right after EOS 0 and keep it: expected [4, 0], got {got}"
    assert len(m.calls) == 2, f"no model call after the EOS token; calls were {m.calls}"


def test_one_token_needs_only_the_prefill():
    m = CachedModel(next_plus_one, 5)
    got = greedy_generate(m, [0, 1, 2], 1)
    assert got == [3], f"the argmax of the LAST prompt row: expected [3], got {got}"
    assert m.calls == [([0, 1, 2], 0)], f"max_new_tokens=1 needs exactly one call; calls were {m.calls}"


def test_ties_pick_the_smallest_id():
    m = CachedModel(lambda seq, v: 1.0 if v in (2, 4) else 0.0, 6)
    got = greedy_generate(m, [1], 3)
    assert got == [2, 2, 2], f"ids 2 and 4 tie: argmax takes 2, got {got}"


def test_eos_in_the_prompt_does_not_stop():
    m = CachedModel(next_plus_one, 5)
    got = greedy_generate(m, [0, 4], 3, eos_ids=[4])
    assert got == [0, 1, 2], f"only generated tokens stop the loop: expected [0, 1, 2], got {got}"


def test_bad_arguments():
    for prompt, n in (([], 3), ([1], 0), ([1], -2)):
        try:
            greedy_generate(CachedModel(next_plus_one, 5), prompt, n)
        except ValueError:
            continue
        raise AssertionError(f"greedy_generate(model, {prompt}, {n}) should raise ValueError")


def test_random_sequences_match_an_uncached_oracle():
    rng = random.Random(1)
    for _ in range(40):
        vocab = rng.randint(2, 12)
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 8))]
        n = rng.randint(1, 15)
        eos = set(rng.sample(range(vocab), rng.randint(0, 2)))
        m = CachedModel(hashed, vocab)
        got = greedy_generate(m, prompt, n, eos_ids=eos)
        expected = uncached_greedy(hashed, vocab, prompt, n, eos)
        assert got == expected, f"prompt {prompt}, max_new_tokens {n}, eos {eos}: expected {expected}, got {got}"
        fed = sum(len(ids) for ids, _ in m.calls)
        assert fed == len(prompt) + len(got) - 1, \
            f"every token is fed once (the last one never): fed {fed} tokens for a prompt of {len(prompt)} and {len(got)} outputs"
