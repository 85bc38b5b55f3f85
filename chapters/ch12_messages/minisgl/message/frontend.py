"""Messages the HTTP front end receives: pieces of generated text for each request, errors and status reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

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
    finish_reason: str | None = None  # when finished: "stop", "length" or "abort"
    prompt_tokens: int = 0
    completion_tokens: int = 0  # tokens generated so far


@dataclass
class ErrorReply(BaseFrontendMsg):
    uid: int
    message: str  # the request was refused (bad prompt, too long for the engine): nothing ran


@dataclass
class StatusReply(BaseFrontendMsg):
    uid: int
    status: Dict[str, int]
