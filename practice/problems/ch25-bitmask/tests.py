import random

from solution import apply_bitmask, pack

EXAMPLES = ["test_statement_example", "test_pack_statement_example"]

NEG = float("-inf")


def test_statement_example():
    logits = [float(t) for t in range(36)]
    got = apply_bitmask(logits, [-2147483646, 5])
    want = [NEG] * 36
    for t in (1, 31, 32, 34):
        want[t] = float(t)
    assert got == want, f"tokens 1, 31, 32 and 34 are allowed, every other is -inf: expected {want}, got {got}"


def test_pack_statement_example():
    got = pack([1, 31, 32, 34], 36)
    assert got == [-2147483646, 5], f"expected [-2147483646, 5], got {got}"
    got = pack(list(range(40)), 40)
    assert got == [-1, 255], f"all 32 bits set is -1 as an int32; 8 bits are 255: expected [-1, 255], got {got}"


def test_bit_31_is_the_sign_bit():
    logits = [0.0] * 32
    got = apply_bitmask(logits, [-2**31])
    want = [NEG] * 31 + [0.0]
    assert got == want, f"-2147483648 is bit 31 alone: only token 31 is allowed; expected {want}, got {got}"
    got = apply_bitmask(logits, [-1])
    assert got == logits, f"-1 has all 32 bits set: every token is allowed; got {got}"
    got = apply_bitmask(logits, [2**31 - 1])
    assert got == [0.0] * 31 + [NEG], f"2147483647 is bits 0 to 30: token 31 is not allowed; got {got}"
    assert pack([31], 32) == [-2**31], f"bit 31 alone is -2147483648 as an int32, not 2147483648: got {pack([31], 32)}"
    assert pack(list(range(32)), 32) == [-1], f"every bit of a word is -1 as an int32: got {pack(list(range(32)), 32)}"


def test_bit_0_is_the_lowest_token_of_its_word():
    logits = [1.0] * 8
    got = apply_bitmask(logits, [0b00000110])
    want = [NEG, 1.0, 1.0, NEG, NEG, NEG, NEG, NEG]
    assert got == want, f"6 = bits 1 and 2: tokens 1 and 2 (bit j is token j, the least significant first); got {got}"
    assert pack([0], 8) == [1], f"token 0 is bit 0, the value 1: got {pack([0], 8)}"
    assert pack([0, 3], 4) == [9], f"tokens 0 and 3: 1 + 8 = 9; got {pack([0, 3], 4)}"


def test_word_boundaries():
    logits = [0.0] * 65
    for t in (0, 31, 32, 33, 63, 64):
        words = [0, 0, 0]
        words[t // 32] = 1 << (t % 32)
        if words[t // 32] >= 2**31:
            words[t // 32] -= 2**32
        got = apply_bitmask(logits, words)
        allowed = [i for i, v in enumerate(got) if v != NEG]
        assert allowed == [t], f"bitmask {words} allows token {t} alone (word {t // 32}, bit {t % 32}); got {allowed}"
        assert pack([t], 65) == words, f"pack([{t}], 65): expected {words}, got {pack([t], 65)}"


def test_the_tail_of_the_last_word_is_ignored():
    logits = [0.5, -1.0, 2.0, 0.0, 3.5]
    got = apply_bitmask(logits, [-1])
    assert got == logits, (
        "a vocabulary of 5 has one word; its bits 5 to 31 are past the end and say nothing (a fresh mask is -1, "
        f"every bit set): expected {logits}, got {got}")
    got = apply_bitmask(logits, [0b11111111111111111111111111100010 - 2**32])
    assert got == [NEG, -1.0, NEG, NEG, NEG], f"only bit 1 of the first five is set; got {got}"
    assert pack([4], 5) == [16], f"pack sets no bit past the vocabulary: expected [16], got {pack([4], 5)}"
    assert len(pack([], 33)) == 2 and len(pack([], 32)) == 1 and pack([], 0) == [], \
        "ceil(vocab / 32) words: 33 tokens need 2, 32 need 1, none need none"


def test_the_input_is_not_changed():
    logits = [1.0, 2.0, 3.0]
    mask = [0b101]
    got = apply_bitmask(logits, mask)
    assert logits == [1.0, 2.0, 3.0], f"the logits passed in were changed in place: {logits}"
    assert mask == [0b101], f"the bitmask passed in was changed: {mask}"
    assert got is not logits, "return a new list"
    assert got == [1.0, NEG, 3.0], f"expected [1.0, -inf, 3.0], got {got}"


def test_invalid_arguments():
    for logits, mask in (([0.0] * 33, [-1]), ([0.0] * 32, [-1, 0]), ([0.0] * 4, [2**31]), ([0.0] * 4, [-2**31 - 1])):
        try:
            apply_bitmask(logits, mask)
        except ValueError:
            continue
        raise AssertionError(
            f"apply_bitmask(<{len(logits)} logits>, {mask}) should raise ValueError: ceil(vocab / 32) words, each "
            "a signed 32-bit int in [-2147483648, 2147483647]")
    for allowed, vocab in (([5], 5), ([-1], 5), ([], -1)):
        try:
            pack(allowed, vocab)
        except ValueError:
            continue
        raise AssertionError(f"pack({allowed}, {vocab}) should raise ValueError")


def test_random_masks():
    rng = random.Random(25)
    for _ in range(300):
        vocab = rng.randint(0, 130)
        logits = [rng.uniform(-5, 5) for _ in range(vocab)]
        allowed = sorted(rng.sample(range(vocab), rng.randint(0, vocab))) if vocab else []
        words = pack(allowed + allowed[:2], vocab)  # a repeated id sets its bit once
        assert len(words) == (vocab + 31) // 32, f"pack(..., {vocab}): {len(words)} words"
        for i, w in enumerate(words):
            assert -2**31 <= w < 2**31, f"pack({allowed}, {vocab}): word {i} = {w} is not a signed 32-bit int"
            unsigned = w % 2**32
            bits = [32 * i + j for j in range(32) if unsigned >> j & 1]
            assert bits == [t for t in allowed if t // 32 == i], f"pack({allowed}, {vocab}): word {i} = {w}"
        got = apply_bitmask(logits, words)
        want = [x if t in allowed else NEG for t, x in enumerate(logits)]
        assert got == want, f"apply_bitmask(logits, pack({allowed}, {vocab})) keeps exactly the allowed tokens"
        if words:  # set the tail bits: nothing changes
            tail = words[-1] % 2**32 | (2**32 - 1) ^ ((1 << (vocab - 32 * (len(words) - 1))) - 1)
            words[-1] = tail - 2**32 if tail >= 2**31 else tail
            assert apply_bitmask(logits, words) == want, f"vocab {vocab}: the tail bits of the last word changed it"
