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
    logprobs: List[TokenLogprob] | None = None  # chapter 24: one per token of this reply, if the request asked


@dataclass
class TokenLogprob:
    """Chapter 24: a generated token as the OpenAI API shows it (its text) with its log-probability, and the most
    likely tokens at its step (texts and log-probabilities, best first)."""

    token: str
    logprob: float
    top_tokens: List[str]
    top_logprobs: List[float]


@dataclass
class ErrorReply(BaseFrontendMsg):
    uid: int
    message: str  # the request was refused (bad prompt, too long for the engine): nothing ran
    param: str = "prompt"  # the request field at fault (chapter 24: also logit_bias)


@dataclass
class StatusReply(BaseFrontendMsg):
    uid: int
    status: Dict[str, int]
