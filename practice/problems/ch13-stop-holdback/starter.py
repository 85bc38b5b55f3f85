def stream_with_stops(pieces: list[str], stops: list[str]) -> tuple[list[str], str | None]:
    """The text sent after each piece (plus the final flush when no stop string occurs), and the stop string
    that ended the stream, or None."""
    raise NotImplementedError
