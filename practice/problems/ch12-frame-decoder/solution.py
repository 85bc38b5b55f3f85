PREFIX = 4  # bytes of big-endian length before each payload


def encode_frame(payload: bytes) -> bytes:
    if len(payload) >= 2 ** (8 * PREFIX):
        raise ValueError(f"a payload of {len(payload)} bytes does not fit a {PREFIX}-byte length")
    return len(payload).to_bytes(PREFIX, "big") + payload


class FrameDecoder:
    def __init__(self, max_len: int):
        self.max_len = max_len
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        frames = []
        while len(self.buffer) >= PREFIX:
            length = int.from_bytes(self.buffer[:PREFIX], "big")
            if length > self.max_len:
                raise ValueError(f"frame of {length} bytes announced, the limit is {self.max_len}")
            if len(self.buffer) < PREFIX + length:
                break  # the body is still on its way
            frames.append(bytes(self.buffer[PREFIX:PREFIX + length]))
            del self.buffer[:PREFIX + length]
        return frames

    def pending(self) -> int:
        return len(self.buffer)
