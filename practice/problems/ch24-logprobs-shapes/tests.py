import random

from solution import chat_logprobs, completion_logprobs

EXAMPLES = ["test_chat_statement_example", "test_completion_statement_example"]

ENTRIES = [("Hi", -0.25, [("Hi", -0.25), ("Hello", -1.5)]), (" é", -0.5, [(" é", -0.5)])]


def test_chat_statement_example():
    got = chat_logprobs(ENTRIES)
    want = {"content": [
        {"token": "Hi", "logprob": -0.25, "bytes": [72, 105],
         "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
                          {"token": "Hello", "logprob": -1.5, "bytes": [72, 101, 108, 108, 111]}]},
        {"token": " é", "logprob": -0.5, "bytes": [32, 195, 169],
         "top_logprobs": [{"token": " é", "logprob": -0.5, "bytes": [32, 195, 169]}]}], "refusal": None}
    assert got == want, f"expected {want}, got {got}"


def test_completion_statement_example():
    got = completion_logprobs(ENTRIES, start=0)
    want = ({"tokens": ["Hi", " é"], "token_logprobs": [-0.25, -0.5],
             "top_logprobs": [{"Hi": -0.25, "Hello": -1.5}, {" é": -0.5}], "text_offset": [0, 2]}, 4)
    assert got == want, f"expected {want}, got {got}"
    got = completion_logprobs([("!", -0.125, [])], start=4)
    want = ({"tokens": ["!"], "token_logprobs": [-0.125], "top_logprobs": [{}], "text_offset": [4]}, 5)
    assert got == want, f"the next chunk starts at 4: expected {want}, got {got}"


def test_bytes_are_utf8():
    got = chat_logprobs([("é", -1.0, [("你", -2.0), ("👍", -3.0), ("\ufffd", -4.0)])])["content"][0]
    assert got["bytes"] == [195, 169], f"'é' is 2 bytes in UTF-8, [195, 169], not its code point 233: got {got['bytes']}"
    want = [[228, 189, 160], [240, 159, 145, 141], [239, 191, 189]]
    assert [t["bytes"] for t in got["top_logprobs"]] == want, \
        f"the alternatives carry their UTF-8 bytes too: expected {want}, got {got['top_logprobs']}"
    assert chat_logprobs([("", -0.5, [])])["content"][0]["bytes"] == [], "an empty token text has no bytes"


def test_offsets_count_characters_not_bytes():
    obj, end = completion_logprobs([("你好", -1.0, []), ("é", -1.0, []), ("!", -1.0, [])], start=10)
    assert obj["text_offset"] == [10, 12, 13], \
        f"offsets are characters of the text ('你好' is 2, not 6 bytes): expected [10, 12, 13], got {obj['text_offset']}"
    assert end == 14, f"the next chunk starts after '!': expected 14, got {end}"


def test_alternatives_best_first_and_empty():
    top = [("b", -0.1), ("a", -0.7), ("c", -2.0)]
    obj, _ = completion_logprobs([("b", -0.1, top), ("x", -0.2, [])])
    assert obj["top_logprobs"] == [{"b": -0.1, "a": -0.7, "c": -2.0}, {}], \
        f"one dict per token, {{}} when no alternatives were asked for; got {obj['top_logprobs']}"
    assert list(obj["top_logprobs"][0]) == ["b", "a", "c"], \
        f"the dict keeps the best-first order: got {list(obj['top_logprobs'][0])}"
    chat = chat_logprobs([("b", -0.1, top), ("x", -0.2, [])])["content"]
    assert [t["token"] for t in chat[0]["top_logprobs"]] == ["b", "a", "c"], \
        f"chat's alternatives stay best first: got {chat[0]['top_logprobs']}"
    assert chat[1]["top_logprobs"] == [], f"no alternatives: an empty list, got {chat[1]['top_logprobs']}"


def test_no_logprobs_and_empty_chunks():
    assert chat_logprobs(None) is None, "no logprobs asked for: null"
    assert completion_logprobs(None, start=7) == (None, 7), "no logprobs asked for: null, the offset unchanged"
    assert chat_logprobs([]) == {"content": [], "refusal": None}, f"no token in this chunk: got {chat_logprobs([])}"
    want = ({"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}, 3)
    assert completion_logprobs([], start=3) == want, f"expected {want}, got {completion_logprobs([], start=3)}"


def test_exact_keys():
    chat = chat_logprobs(ENTRIES)
    assert set(chat) == {"content", "refusal"} and chat["refusal"] is None, f"chat's object: got keys {set(chat)}"
    assert set(chat["content"][0]) == {"token", "logprob", "bytes", "top_logprobs"}, chat["content"][0]
    assert set(chat["content"][0]["top_logprobs"][0]) == {"token", "logprob", "bytes"}, chat["content"][0]
    obj, _ = completion_logprobs(ENTRIES)
    assert set(obj) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, f"got keys {set(obj)}"


def test_invalid_start():
    try:
        completion_logprobs(ENTRIES, start=-1)
    except ValueError:
        return
    raise AssertionError("a negative start should raise ValueError")


def test_a_stream_continues_where_the_last_chunk_ended():
    rng = random.Random(24)
    words = ["a", " the", "é", "你", "好", "👍", " ok", "\n", "", "ß"]
    for _ in range(200):
        entries = []
        for _ in range(rng.randint(0, 12)):
            texts = rng.sample(words, rng.randint(0, 4))
            top = [(t, -0.5 * (i + 1)) for i, t in enumerate(texts)]
            entries.append((rng.choice(words), -rng.random(), top))
        whole, whole_end = completion_logprobs(entries)
        ctx = f"entries {entries}"
        text = "".join(t for t, _, _ in entries)
        assert whole_end == len(text), f"{ctx}: the end is the length of the text, {len(text)}; got {whole_end}"
        for i, offset in enumerate(whole["text_offset"]):
            assert text[offset:].startswith(entries[i][0]), f"{ctx}: token {i} is not at offset {offset}"
        at, parts, cut = 0, [], 0
        while cut < len(entries):
            size = rng.randint(1, 4)
            part, at = completion_logprobs(entries[cut : cut + size], start=at)
            parts.append(part)
            cut += size
        joined = {k: [v for p in parts for v in p[k]] for k in whole}
        assert joined == whole and at == whole_end, \
            f"{ctx}: chunk after chunk (each starting where the last ended) must give the whole answer's logprobs"
        chat = chat_logprobs(entries)["content"]
        assert [c["bytes"] for c in chat] == [list(t.encode()) for t, _, _ in entries], f"{ctx}: bytes {chat}"
        assert [c["token"] for c in chat] == whole["tokens"], f"{ctx}: the same tokens in both shapes"
