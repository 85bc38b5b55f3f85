def encode_frame(payload: bytes) -> bytes:
    """A 4-byte big-endian length, then the payload."""
    raise NotImplementedError


class FrameDecoder:
    def __init__(self, max_len: int):
        raise NotImplementedError

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads completed by this chunk, in order; keeps the unfinished rest."""
        raise NotImplementedError

    def pending(self) -> int:
        """Bytes buffered but not yet returned."""
        raise NotImplementedError
