import codecs
import random

from solution import utf8_stream

EXAMPLES = ["test_statement_examples", "test_emoji_split_everywhere"]
TEXT = "Hi 你好, naïve café 👍🏽 — 日本語 🚀!"


def _reference(chunks):
    """The standard library's incremental decoder: what a correct stream releases after each chunk."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return [dec.decode(c) for c in chunks] + [dec.decode(b"", final=True)]


def _random_split(rng, data):
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 8)))) if len(data) > 1 else []
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


def test_statement_examples():
    assert utf8_stream([b"Hi \xe4\xbd", b"\xa0!"]) == ["Hi ", "\u4f60!", ""]
    assert utf8_stream([b"\xf0\x9f", b"\x91", b"\x8d"]) == ["", "", "\U0001f44d", ""]
    assert utf8_stream([b"ok\xe4\xbd"]) == ["ok", "\ufffd"], "an unfinished character is decoded at the end"


def test_emoji_split_everywhere():
    data = "a👍b".encode()
    for cut in range(1, len(data)):
        got = utf8_stream([data[:cut], data[cut:]])
        assert got == _reference([data[:cut], data[cut:]]), f"split at byte {cut}: {got}"
        assert "\ufffd" not in "".join(got), f"split at byte {cut}: a half character was shown: {got}"


def test_empty_stream():
    assert utf8_stream([]) == [""]
    assert utf8_stream([b"", b""]) == ["", "", ""]


def test_valid_text_in_random_chunks_matches_an_incremental_decoder():
    rng = random.Random(13)
    data = TEXT.encode()
    for _ in range(300):
        chunks = _random_split(rng, data)
        got = utf8_stream(chunks)
        assert got == _reference(chunks), f"chunks {chunks}: {got}"


def test_random_bytes_add_up_and_never_show_a_character_too_early():
    rng = random.Random(7)
    pool = list(TEXT.encode()) + [0x80, 0xBF, 0xC0, 0xE0, 0xED, 0xF4, 0xF8, 0xFF]
    for _ in range(400):
        data = bytes(rng.choice(pool) for _ in range(rng.randint(1, 16)))
        chunks = _random_split(rng, data)
        got = utf8_stream(chunks)
        full = data.decode("utf-8", "replace")
        assert len(got) == len(chunks) + 1, f"one string per chunk plus the end, got {len(got)}"
        assert "".join(got) == full, f"chunks {chunks}: pieces {got} do not add up to {full!r}"
        shown = ""
        for i, piece in enumerate(got[:-1]):
            shown += piece
            now = b"".join(chunks[:i + 1]).decode("utf-8", "replace")
            assert now.startswith(shown) and full.startswith(shown), \
                f"chunks {chunks}: after chunk {i} shown {shown!r}, which later bytes change"
