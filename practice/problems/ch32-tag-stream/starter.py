def stream_blocks(pieces: list, start: str, end: str) -> list:
    """Split a text that arrives in pieces into plain text and tagged blocks, handing out each part as soon as it is
    certain. pieces: the text's pieces in order; start, end: the tags (e.g. "<tool_call>", "</tool_call>").
    Returns one list of events per piece, and one more for the end of the text: ("text", s) or ("block", body)."""
    raise NotImplementedError
