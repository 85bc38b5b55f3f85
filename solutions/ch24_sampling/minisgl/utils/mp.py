"""ZMQ queues between processes: a PUSH end that sends messages and a PULL end that receives them.

One side binds the address (create=True), the other connects; either may start first, ZMQ reconnects.
Messages go out as msgpack frames of the family's encoder map and come back through the family's decoder.
A frame that cannot be decoded is consumed and reported as a MessageError: the receiving loop catches it
and carries on with the next frame.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

import msgpack
import zmq

from minisgl.message.utils import MessageError

T = TypeVar("T")
LINGER_MS = 1000  # on close, unsent frames get this long to leave; a dead peer never blocks shutdown


def _socket(kind: int, addr: str, create: bool) -> tuple[zmq.Context, zmq.Socket]:
    context = zmq.Context()  # one per queue: closing it never waits on another queue's sockets
    socket = context.socket(kind)
    socket.setsockopt(zmq.LINGER, LINGER_MS)
    socket.bind(addr) if create else socket.connect(addr)
    return context, socket


class ZmqPushQueue(Generic[T]):
    def __init__(self, addr: str, create: bool, encoder: Callable[[T], dict]):
        self.context, self.socket = _socket(zmq.PUSH, addr, create)
        self.encoder = encoder

    def put(self, obj: T) -> None:
        """Send one message (queued by ZMQ until the peer takes it)."""
        frame = msgpack.packb(self.encoder(obj), use_bin_type=True)
        self.socket.send(frame, copy=False)

    def stop(self) -> None:
        self.socket.close()
        self.context.term()

    close = stop


class ZmqPullQueue(Generic[T]):
    def __init__(self, addr: str, create: bool, decoder: Callable[[Any], T]):
        self.context, self.socket = _socket(zmq.PULL, addr, create)
        self.decoder = decoder

    def get(self, timeout: float | None = None) -> T | None:
        """The next message; with a timeout (seconds, 0 = do not wait), None if none came in time.
        A frame that does not decode is consumed and raises MessageError."""
        if timeout is not None and not self.socket.poll(timeout=max(0, round(timeout * 1000))):
            return None
        return self.decode(self.socket.recv())

    def get_raw(self) -> bytes:
        return self.socket.recv()

    def decode(self, raw: bytes) -> T:
        """One frame as a message. Bytes that are not msgpack, or a map the decoder refuses, raise MessageError."""
        try:
            data = msgpack.unpackb(raw, raw=False, strict_map_key=False)  # logit_bias has int keys (ch24)
        except Exception as e:  # msgpack raises several types: ValueError, ExtraData, FormatError, StackError
            raise MessageError(f"a {len(raw)}-byte frame is not valid msgpack ({type(e).__name__}: {e})") from None
        return self.decoder(data)

    def empty(self) -> bool:
        return self.socket.poll(timeout=0) == 0

    def stop(self) -> None:
        self.socket.close()
        self.context.term()

    close = stop
