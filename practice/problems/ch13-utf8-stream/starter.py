def utf8_stream(chunks: list[bytes]) -> list[str]:
    """One string per chunk (the text that is safe to show after it), plus the text the end of the stream
    releases."""
    raise NotImplementedError
