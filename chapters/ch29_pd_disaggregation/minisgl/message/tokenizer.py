"""Messages the tokenizer/detokenizer process receives: text to tokenize and aborts (from the front end); tokens
to detokenize, refused requests and status reports (from the scheduler)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

from minisgl.core import SamplingParams

from .utils import decode_message, encode_message


@dataclass
class BaseTokenizerMsg:
    @staticmethod
    def encoder(msg: BaseTokenizerMsg) -> dict:
        return encode_message(msg)

    @staticmethod
    def decoder(data: Any) -> BaseTokenizerMsg:
        return decode_message(data, BaseTokenizerMsg)


@dataclass
class BatchTokenizerMsg(BaseTokenizerMsg):
    data: List[BaseTokenizerMsg]


@dataclass
class DetokenizeMsg(BaseTokenizerMsg):
    """One scheduler step's new tokens, as arrays: one message per step however many requests ran, and no object
    per token on either side. Token i belongs to request uids[i] (a request with several tokens in one step has
    them in order). finish_reasons[i] is "" while the request goes on, else why it ended with token i: "stop" (an
    EOS token) or "length" (max_tokens)."""

    uids: List[int]
    tokens: List[int]
    finish_reasons: List[str]
    # Chapter 24, for the tokens of requests that asked: their indices in the arrays, each one's log-probability,
    # and the ids and log-probabilities of the most likely tokens at its step (top_logprobs of them, best first)
    logprob_rows: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    top_ids: List[List[int]] = field(default_factory=list)
    top_logprobs: List[List[float]] = field(default_factory=list)

    @classmethod
    def one(cls, uid: int, token: int, finish_reason: str | None = None) -> DetokenizeMsg:
        """A step of one token (tests, examples)."""
        return cls([uid], [token], [finish_reason or ""])

    def rows(self):
        """(uid, token, finish reason or None) for each token, in order."""
        return ((uid, token, reason or None) for uid, token, reason in zip(self.uids, self.tokens,
                                                                              self.finish_reasons))


@dataclass
class TokenizeMsg(BaseTokenizerMsg):
    uid: int
    text: str | List[Dict[str, str]] | List[int]  # a prompt, chat messages [{"role", "content"}], or token ids
    sampling_params: SamplingParams
    stop: List[str] = field(default_factory=list)  # stop strings: the text ends before the first one
    stop_token_ids: List[int] = field(default_factory=list)  # more tokens that end the text (not shown)
    auto_max_tokens: bool = False  # max_tokens was not given: use all the room the context leaves
    stream_interval: int = 1  # a reply every this many tokens (and the first and the last); 0: the first and last only
    bootstrap_room: int | None = None  # chapter 29: the KV transfer's name, which the router gave both servers


@dataclass
class AbortMsg(BaseTokenizerMsg):
    uid: int


@dataclass
class ErrorMsg(BaseTokenizerMsg):
    uid: int
    message: str  # why the scheduler refused the request (it never ran)


@dataclass
class StatusMsg(BaseTokenizerMsg):
    uid: int
    status: Dict[str, int]  # the scheduler's counters, answering a GetStatusMsg
