from solution import stream_blocks

EXAMPLES = ["test_statement_example", "test_a_tag_split_across_pieces_is_held_back"]
S, E = "<tool_call>", "</tool_call>"


def flat(events):
    return [e for step in events for e in step]


def merged(events):
    """The events with neighbouring texts joined: what a client reassembles."""
    out = []
    for kind, s in flat(events):
        if out and kind == "text" and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + s)
        else:
            out.append((kind, s))
    return out


def test_statement_example():
    got = stream_blocks(["Sure <to", "ol_call>{\"a\": 1}</tool", "_call> ok"], S, E)
    want = [[("text", "Sure ")], [], [("block", '{"a": 1}'), ("text", " ok")], []]
    assert got == want, f"expected {want} (see the statement), got {got}"


def test_a_tag_split_across_pieces_is_held_back():
    text = "a <tool_call>x</tool_call> b"
    for i in range(len(text) + 1):
        got = stream_blocks([text[:i], text[i:]], S, E)
        assert merged(got) == [("text", "a "), ("block", "x"), ("text", " b")], f"cut at {i}: {got}"
        assert all("<" not in s for kind, s in flat(got) if kind == "text"), f"cut at {i}: a tag leaked: {got}"


def test_every_two_cuts_reassemble_the_same():
    text = 'x < y <tool_call>{"n": "<"}</tool_call><tool_call>2</tool_call>z<'
    want = [("text", "x < y "), ("block", '{"n": "<"}'), ("block", "2"), ("text", "z<")]
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            got = stream_blocks([text[:i], text[i:j], text[j:]], S, E)
            assert merged(got) == want, f"cut at {i}, {j}: {merged(got)}"


def test_text_that_cannot_start_a_tag_goes_out_at_once():
    got = stream_blocks(["hello", " world <", "b"], S, E)
    assert got[0] == [("text", "hello")], f"nothing in 'hello' can start a tag: hand it out now, got {got[0]}"
    assert got[1] == [("text", " world ")], f"only '<' may be a tag's start: got {got[1]}"
    assert got[2] == [("text", "<b")] and got[3] == [], f"'<b' is no tag: {got}"


def test_an_unclosed_block_is_text_at_the_end():
    got = stream_blocks(["a<tool_call>{\"x\"", ": 1"], S, E)
    assert got[:2] == [[("text", "a")], []], f"the block's body waits for its closing tag: {got}"
    assert got[2] == [("text", '<tool_call>{"x": 1')], f"never closed: the text as written, at the end: {got}"


def test_one_event_list_per_piece_and_one_for_the_end():
    got = stream_blocks([], S, E)
    assert got == [[]], f"no pieces: just the end, with nothing in it: {got}"
    got = stream_blocks(["", "", ""], S, E)
    assert got == [[], [], [], []], f"empty pieces hand out nothing: {got}"


def test_other_tags():
    got = stream_blocks(["<think>plan</th", "ink>answer"], "<think>", "</think>")
    assert merged(got) == [("block", "plan"), ("text", "answer")], got
    assert got[0] == [], f"'plan</th' may continue as the closing tag: the block is not complete: {got[0]}"


def test_empty_tags_are_refused():
    try:
        stream_blocks(["x"], "", E)
    except ValueError:
        return
    raise AssertionError("an empty tag must raise ValueError")
