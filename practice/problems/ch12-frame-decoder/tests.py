import random

from solution import FrameDecoder, encode_frame

EXAMPLES = ["test_statement_example", "test_every_split_point"]


def test_statement_example():
    d = FrameDecoder(max_len=100)
    stream = encode_frame(b"hi") + encode_frame(b"") + encode_frame(b"abc")
    assert d.feed(stream[:3]) == [], "3 bytes are not even a whole length prefix"
    assert d.feed(stream[3:11]) == [b"hi", b""], "b'hi' and the empty frame are complete after 11 bytes"
    assert d.pending() == 1, f"one byte of the next prefix is buffered, pending() = {d.pending()}"
    assert d.feed(stream[11:]) == [b"abc"]
    assert d.pending() == 0


def test_encode_frame_layout():
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(b"xyz") == b"\x00\x00\x00\x03xyz", "the length is 4 bytes, big-endian"
    assert encode_frame(bytes(258))[:4] == b"\x00\x00\x01\x02"


def test_every_split_point():
    payloads = [b"alpha", b"", b"\x00\x00\x00\x09", b"z" * 300]
    stream = b"".join(encode_frame(p) for p in payloads)
    for cut in range(len(stream) + 1):
        d = FrameDecoder(max_len=1000)
        got = d.feed(stream[:cut]) + d.feed(stream[cut:])
        assert got == payloads, f"split at byte {cut}: got {got!r}"
        assert d.pending() == 0


def test_byte_by_byte():
    payloads = [b"one", b"two", b"three"]
    d = FrameDecoder(max_len=10)
    got = []
    for b in b"".join(map(encode_frame, payloads)):
        got += d.feed(bytes([b]))
    assert got == payloads, f"one byte at a time: {got!r}"


def test_empty_feed_returns_nothing():
    d = FrameDecoder(max_len=10)
    assert d.feed(b"") == [] and d.pending() == 0


def test_oversized_length_is_refused_from_the_prefix_alone():
    d = FrameDecoder(max_len=8)
    assert d.feed(encode_frame(b"12345678")) == [b"12345678"], "exactly max_len is allowed"
    try:
        d.feed(b"\x00\x00\x00\x09")  # announces 9 bytes, no body sent
    except ValueError:
        return
    raise AssertionError("a prefix announcing more than max_len must raise ValueError before the body arrives")


def test_random_chunking_matches_the_payloads():
    rng = random.Random(12)
    for trial in range(200):
        payloads = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 3, 4, 5, 40])))
                    for _ in range(rng.randint(0, 8))]
        stream = b"".join(map(encode_frame, payloads))
        d, got, i = FrameDecoder(max_len=64), [], 0
        while i < len(stream):
            n = rng.randint(0, 12)
            got += d.feed(stream[i:i + n])
            i += n
        assert got == payloads, f"trial {trial}: got {got!r}, sent {payloads!r}"
        assert d.pending() == 0, f"trial {trial}: {d.pending()} bytes left over"
