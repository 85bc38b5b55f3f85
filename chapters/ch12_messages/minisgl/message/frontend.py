"""Messages the HTTP front end receives: pieces of generated text for each request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List

from .utils import decode_message, encode_message


@dataclass
class BaseFrontendMsg:
    @staticmethod
    def encoder(msg: BaseFrontendMsg) -> dict:
        return encode_message(msg)

    @staticmethod
    def decoder(data: Any) -> BaseFrontendMsg:
        return decode_message(data, BaseFrontendMsg)


@dataclass
class BatchFrontendMsg(BaseFrontendMsg):
    data: List[BaseFrontendMsg]


@dataclass
class UserReply(BaseFrontendMsg):
    uid: int
    incremental_output: str  # the text generated since the last reply
    finished: bool
