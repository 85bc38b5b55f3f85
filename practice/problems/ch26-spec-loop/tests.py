import random

from solution import speculative_generate

EXAMPLES = ["test_statement_example", "test_statement_example_with_eos"]


def count_up(tokens):
    """The statement's target: the greedy next token is the last one plus 1, mod 5."""
    return (tokens[-1] + 1) % 5


def prompt_lookup(tokens, k):
    """The statement's proposer: what followed the last token when it last appeared before."""
    last = tokens[-1]
    for i in range(len(tokens) - 2, -1, -1):
        if tokens[i] == last:
            return tokens[i + 1 : i + 1 + k]
    return []


def mixing_target(vocab):
    """A target that depends on the whole sequence, not only on its last token."""
    def target(tokens):
        h = len(tokens)
        for i, t in enumerate(tokens):
            h = (h * 31 + (i + 1) * (t + 7)) % 1000003
        return h % vocab
    return target


def greedy(target, prompt, max_tokens, eos=None):
    """Plain greedy decoding, one token per pass: what speculative decoding must reproduce."""
    out = []
    while len(out) < max_tokens:
        out.append(target(list(prompt) + out))
        if out[-1] == eos:
            break
    return out


def oracle_passes(propose, prompt, k, want):
    """The passes speculative decoding needs to produce `want` (the greedy output): a step's drafts are
    right as far as they agree with the greedy tokens at that point; the pass adds those and one more."""
    pos = passes = 0
    while pos < len(want):
        drafts = list(propose(list(prompt) + want[:pos], k))
        right = 0
        while right < len(drafts) and pos + right < len(want) and drafts[right] == want[pos + right]:
            right += 1
        pos += right + 1
        passes += 1
    return passes


def perfect(target):
    """A proposer that always guesses what target will say: k + 1 tokens per pass."""
    def propose(tokens, k):
        return greedy(target, tokens, k)
    return propose


def check(target, propose, prompt, k, max_tokens, eos=None, what=""):
    got = speculative_generate(target, propose, list(prompt), k, max_tokens, eos)
    assert isinstance(got, tuple) and len(got) == 2, f"return (output tokens, passes), got {got!r}"
    out, passes = got
    want = greedy(target, prompt, max_tokens, eos)
    ctx = f"{what}prompt {prompt}, k={k}, max_tokens={max_tokens}, eos={eos}"
    assert out == want, f"{ctx}: the output must be plain greedy decoding's {want}, got {out}"
    n = oracle_passes(propose, prompt, k, want)
    assert passes == n, f"{ctx}: output {out} takes {n} target passes, got {passes}"
    return out, passes


def test_statement_example():
    got = speculative_generate(count_up, prompt_lookup, [1, 2, 4, 0, 1], 3, 7)
    assert got == ([2, 3, 4, 0, 1, 2, 3], 3), (
        "pass 1: drafts [2, 4, 0], 2 accepted, then target's 3; pass 2: no drafts, target's 4; pass 3: drafts "
        f"[0, 1, 2] all accepted plus the bonus 3: expected ([2, 3, 4, 0, 1, 2, 3], 3), got {got}")


def test_statement_example_with_eos():
    got = speculative_generate(count_up, prompt_lookup, [1, 2, 4, 0, 1], 3, 7, eos=0)
    assert got == ([2, 3, 4, 0], 3), \
        f"pass 3 accepts the draft 0, the eos: the output ends right after it; expected ([2, 3, 4, 0], 3), got {got}"


def test_no_drafts_is_one_token_per_pass():
    target = mixing_target(11)
    out, passes = check(target, lambda tokens, k: [], [3, 1, 4], 4, 9, what="a proposer that returns []: ")
    assert passes == 9, f"no drafts: every pass yields target's own token only, 9 passes for 9 tokens; got {passes}"


def test_a_perfect_proposer_gives_k_plus_one_tokens_per_pass():
    target = mixing_target(13)
    for k, max_tokens, want in ((3, 12, 3), (3, 13, 4), (1, 6, 3), (5, 6, 1), (4, 1, 1)):
        out, passes = check(target, perfect(target), [2, 7], k, max_tokens, what="a perfect proposer: ")
        assert passes == want, (
            f"k={k}: every draft is accepted, so a pass yields k drafts + 1 bonus token: {max_tokens} tokens in "
            f"{want} passes, got {passes}")


def test_the_bonus_token_after_all_drafts_are_accepted():
    target = mixing_target(17)
    out, passes = speculative_generate(target, perfect(target), [5], 2, 3)
    want = greedy(target, [5], 3)
    assert (out, passes) == (want, 1), (
        f"both drafts are right: the same pass also gives target's token after them (the bonus), 3 tokens in 1 "
        f"pass; expected ({want}, 1), got ({out}, {passes})")


def test_a_proposer_wrong_at_the_first_draft():
    target = mixing_target(7)

    def wrong_first(tokens, k):
        right = greedy(target, tokens, k)
        return [(right[0] + 1) % 7] + right[1:]  # the first guess is wrong, the rest would follow the truth

    out, passes = check(target, wrong_first, [1, 2, 3], 3, 8, what="the first draft always wrong: ")
    assert passes == 8, f"a wrong first draft leaves the pass with target's token only: 8 passes, got {passes}"


def test_nothing_after_the_first_wrong_draft_is_accepted():
    # count_up: after a wrong draft d, the next draft d + 1 agrees with target *given d*, but d was never
    # emitted, so it must not be accepted.
    def wrong_then_consistent(tokens, k):
        d = (tokens[-1] + 2) % 5
        return [(d + i) % 5 for i in range(k)]

    out, passes = check(count_up, wrong_then_consistent, [0], 4, 6, what="drafts wrong from the first on: ")
    assert out == [1, 2, 3, 4, 0, 1] and passes == 6, f"expected ([1, 2, 3, 4, 0, 1], 6), got ({out}, {passes})"

    def right_wrong_right(tokens, k):
        return [(tokens[-1] + 1) % 5, (tokens[-1] + 3) % 5, (tokens[-1] + 4) % 5]  # the third fits after the second

    out, passes = check(count_up, right_wrong_right, [0], 3, 6, what="right, wrong, right: ")
    assert out == [1, 2, 3, 4, 0, 1] and passes == 3, f"2 tokens a pass (1 draft + target's): got ({out}, {passes})"


def test_drafts_longer_than_what_max_tokens_leaves():
    target = mixing_target(19)
    out, passes = check(target, perfect(target), [4, 4], 8, 3, what="k=8 drafts, 3 tokens wanted: ")
    assert len(out) == 3 and passes == 1, f"one pass, cut at 3 tokens: got {len(out)} tokens in {passes} passes"
    out, passes = check(target, perfect(target), [4, 4], 4, 7, what="k=4, 7 tokens wanted: ")
    assert len(out) == 7 and passes == 2, \
        f"5 tokens in pass 1, 2 of pass 2's 5 kept: 7 tokens in 2 passes; got {len(out)} in {passes}"


def test_eos_inside_the_accepted_drafts():
    target = mixing_target(23)
    want = greedy(target, [9, 1], 6)
    eos = want[1]  # the second token (the first is another one)
    out, passes = check(target, perfect(target), [9, 1], 5, 6, eos=eos, what="eos as the second draft: ")
    assert out == want[:2] and passes == 1, (
        f"the second accepted draft is the eos: stop right after it, dropping the other drafts and the bonus: "
        f"expected ({want[:2]}, 1), got ({out}, {passes})")


def test_eos_as_the_bonus_token():
    target = mixing_target(23)
    want = greedy(target, [9, 1], 6)
    out, passes = check(target, perfect(target), [9, 1], 2, 6, eos=want[2], what="eos as the bonus token: ")
    assert out == want[:3] and passes == 1, f"expected ({want[:3]}, 1), got ({out}, {passes})"


def test_k_equal_1():
    out, passes = check(count_up, prompt_lookup, [0, 1, 2, 3, 4, 0], 1, 10, what="k=1: ")
    assert (out, passes) == ([1, 2, 3, 4, 0, 1, 2, 3, 4, 0], 5), \
        f"k=1 with a right draft every time: 2 tokens a pass; expected ([1, 2, 3, 4, 0, 1, 2, 3, 4, 0], 5), got ({out}, {passes})"


def test_the_proposer_sees_the_whole_sequence_so_far():
    seen = []

    def recording(tokens, k):
        seen.append((list(tokens), k))
        return prompt_lookup(tokens, k)

    speculative_generate(count_up, recording, [1, 2, 4, 0, 1], 3, 7)
    want = [([1, 2, 4, 0, 1], 3), ([1, 2, 4, 0, 1, 2, 3], 3), ([1, 2, 4, 0, 1, 2, 3, 4], 3)]
    assert seen == want, (
        f"the proposer is called once a pass with the prompt and every token output so far, and k: expected "
        f"{want}, got {seen}")


def test_the_prompt_is_not_changed():
    prompt = [1, 2, 4, 0, 1]
    speculative_generate(count_up, prompt_lookup, prompt, 3, 7)
    assert prompt == [1, 2, 4, 0, 1], f"the prompt passed in was changed: {prompt}"


def test_invalid_arguments():
    for args in (([], 3, 5), ([1], 0, 5), ([1], -1, 5), ([1], 3, 0)):
        prompt, k, max_tokens = args
        try:
            speculative_generate(count_up, prompt_lookup, prompt, k, max_tokens)
        except ValueError:
            continue
        raise AssertionError(f"speculative_generate(target, propose, {prompt}, k={k}, max_tokens={max_tokens}) "
                             "should raise ValueError")
    try:
        speculative_generate(count_up, lambda tokens, k: [0] * (k + 1), [1], 3, 5)
    except ValueError:
        pass
    else:
        raise AssertionError("a proposer that returns 4 drafts with k=3 should make it raise ValueError")


def test_random_targets_and_proposers():
    rng = random.Random(26)
    for case in range(150):
        vocab = rng.randint(2, 9)
        target = mixing_target(vocab)
        seed = rng.randrange(10**6)

        def propose(tokens, k, seed=seed, target=target, vocab=vocab):
            # deterministic in (tokens, k): some right guesses, then anything
            r = random.Random(seed * 7919 + sum((i + 1) * t for i, t in enumerate(tokens)) * 31 + len(tokens))
            n = r.randint(0, k)
            right = greedy(target, tokens, r.randint(0, n))
            return right + [r.randrange(vocab) for _ in range(n - len(right))]

        prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 5))]
        k = rng.randint(1, 6)
        max_tokens = rng.randint(1, 24)
        eos = rng.choice([None, rng.randrange(vocab)])
        check(target, propose, prompt, k, max_tokens, eos, what=f"random case {case}: ")
