import random

from solution import stream_with_stops

EXAMPLES = ["test_statement_examples", "test_stop_at_the_very_start"]


def _oracle(pieces, stops):
    """Brute force: after each piece, decide from all the text received so far."""
    out, sent = [], 0
    for i in range(len(pieces)):
        text = "".join(pieces[:i + 1])
        hits = [(text.find(s), j) for j, s in enumerate(stops) if s in text]
        if hits:
            at, j = min(hits)
            out.append(text[sent:at])
            return out, stops[j]
        held = [h for h in range(sent, len(text)) if any(s.startswith(text[h:]) and s != text[h:] for s in stops)]
        keep = held[0] if held else len(text)  # the longest tail that could begin a stop string waits
        out.append(text[sent:keep])
        sent = keep
    out.append("".join(pieces)[sent:])
    return out, None


def test_statement_examples():
    assert stream_with_stops(["Hello wo", "rld", "!"], ["world"]) == (["Hello ", ""], "world")
    assert stream_with_stops(["a wor", "m"], ["world"]) == (["a ", "worm", ""], None)
    assert stream_with_stops(["The end"], ["the end!"]) == (["The end", ""], None), "matching is case-sensitive"


def test_stop_at_the_very_start():
    assert stream_with_stops(["##", " title"], ["##"]) == ([""], "##")


def test_no_stops_sends_everything_at_once():
    assert stream_with_stops(["ab", "", "c"], []) == (["ab", "", "c", ""], None)


def test_earliest_stop_wins_then_the_first_listed():
    assert stream_with_stops(["xx END yy STOP"], ["STOP", "END"]) == (["xx "], "END")
    assert stream_with_stops(["see abc"], ["abc", "ab"]) == (["see "], "abc")
    assert stream_with_stops(["see abc"], ["ab", "abc"]) == (["see "], "ab")


def test_a_stop_string_split_over_every_boundary():
    text, stop = "one two three", "two th"
    for a in range(1, len(text)):
        for b in range(a, len(text)):
            pieces = [text[:a], text[a:b], text[b:]]
            out, matched = stream_with_stops(pieces, [stop])
            assert "".join(out) == "one " and matched == stop, f"pieces {pieces}: {out}, {matched}"


def test_random_streams_match_a_brute_force_oracle():
    rng = random.Random(5)
    for _ in range(2000):
        text = "".join(rng.choice("ab ") for _ in range(rng.randint(0, 12)))
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(0, min(4, len(text) + 1))))
        pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        stops = ["".join(rng.choice("ab ") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(0, 3))]
        got = stream_with_stops(pieces, stops)
        assert got == _oracle(pieces, stops), f"pieces {pieces}, stops {stops}: got {got}, want {_oracle(pieces, stops)}"
