def stream_blocks(pieces: list, start: str, end: str) -> list:
    """Split a text that arrives in pieces into plain text and tagged blocks, handing out each part as soon as it is
    certain. pieces: the text's pieces in order; start, end: the tags (e.g. "<tool_call>", "</tool_call>").
    Returns one list of events per piece, and one more for the end of the text: ("text", s) or ("block", body)."""
    if not start or not end:
        raise ValueError("the tags must not be empty")

    def held(text, tag):  # the longest end of text that is a proper start of tag
        for k in range(min(len(text), len(tag) - 1), 0, -1):
            if text.endswith(tag[:k]):
                return k
        return 0

    out, buffer, inside = [], "", False
    for piece in pieces:
        buffer += piece
        events = []
        while True:
            if inside:
                at = buffer.find(end)
                if at < 0:
                    break
                events.append(("block", buffer[:at]))
                buffer, inside = buffer[at + len(end):], False
            else:
                at = buffer.find(start)
                if at < 0:
                    keep = held(buffer, start)
                    if len(buffer) > keep:
                        events.append(("text", buffer[:len(buffer) - keep]))
                    buffer = buffer[len(buffer) - keep:]
                    break
                if at > 0:
                    events.append(("text", buffer[:at]))
                buffer, inside = buffer[at + len(start):], True
        out.append(events)
    if inside:
        out.append([("text", start + buffer)])  # never closed: it was not a block
    else:
        out.append([("text", buffer)] if buffer else [])
    return out
