def read_stream(chunks: list[bytes]) -> dict:
    """{"text", "finish_reason", "usage", "error", "done"} of a streamed response given as raw byte chunks."""
    raise NotImplementedError
