import json
import random

from solution import read_stream

EXAMPLES = ["test_statement_example", "test_a_chat_stream_with_usage"]


def _event(obj) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def _chat(pieces, reason, usage=None) -> bytes:
    """A chat stream as chapter 15's server writes it: role first, one chunk per piece, the reason, usage, DONE."""
    events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": pieces[0]}, "finish_reason": None}]}]
    events += [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces[1:]]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    if usage is not None:
        events.append({"choices": [], "usage": usage})
    return b"".join(map(_event, events)) + _event("[DONE]")


def _cut(data: bytes, rng) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 12))))
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


def test_statement_example():
    got = read_stream([b'data: {"choices": [{"text": "Hi", "finish_reason": null}]}\n\nda',
                       b'ta: {"choices": [{"text": "!", "finish_reason": "length"}]}\n\ndata: [DONE]\n\n'])
    assert got == {"text": "Hi!", "finish_reason": "length", "usage": None, "error": None, "done": True}, got


def test_a_chat_stream_with_usage():
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    got = read_stream([_chat(["The", " capital", " is Paris."], "stop", usage)])
    assert got == {"text": "The capital is Paris.", "finish_reason": "stop", "usage": usage, "error": None,
                   "done": True}, got


def test_a_cut_inside_a_character_and_inside_the_separator():
    data = _chat(["Caf", "é ", "☕", " 👍"], "stop")
    for at in range(1, len(data)):
        got = read_stream([data[:at], data[at:]])
        assert got["text"] == "Café ☕ 👍" and got["done"], f"cut at byte {at}: {got}"


def test_comments_other_lines_and_no_space_after_the_colon():
    data = (b": keep-alive\n\n" + b'event: x\ndata:{"choices": [{"text": "a", "finish_reason": null}]}\n\n'
            + _event("[DONE]"))
    assert read_stream([data]) == {"text": "a", "finish_reason": None, "usage": None, "error": None, "done": True}


def test_an_error_event_stops_the_stream():
    data = (_event({"choices": [{"text": "par", "finish_reason": None}]})
            + _event({"error": {"message": "the scheduler process died", "type": "service_unavailable"}})
            + _event({"choices": [{"text": "tial", "finish_reason": None}]}))
    got = read_stream([data])
    assert got == {"text": "par", "finish_reason": None, "usage": None, "error": "the scheduler process died",
                   "done": False}, got


def test_after_done_and_an_unfinished_event_are_ignored():
    tail = _event({"choices": [{"text": "late", "finish_reason": None}]})
    got = read_stream([_chat(["ok"], "length") + tail])
    assert got["text"] == "ok" and got["done"], "nothing after [DONE] counts"
    got = read_stream([_event({"choices": [{"text": "a", "finish_reason": None}]}), b'data: {"choices": []}\n'])
    assert got["text"] == "a" and not got["done"], "an event without its blank line is not complete"


def test_random_streams_cut_anywhere():
    rng = random.Random(15)
    alphabet = "ab c\né☕👍\"\\"
    for _ in range(400):
        pieces = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(1, 6))]
        usage = rng.choice([None, {"prompt_tokens": 3, "completion_tokens": len(pieces), "total_tokens": 3 + len(pieces)}])
        reason = rng.choice(["stop", "length", "abort"])
        data = _chat(pieces, reason, usage)
        got = read_stream(_cut(data, rng))
        want = {"text": "".join(pieces), "finish_reason": reason, "usage": usage, "error": None, "done": True}
        assert got == want, f"pieces {pieces}: got {got}"
