"""Messages the HTTP front end receives: pieces of generated text for each request, errors and status reports."""

from __future__ import annotations

from dataclasses import dataclass, field
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
class UserReplyBatch(BaseFrontendMsg):
    """The UserReplies of one step as columns, one list per field: a step of 256 requests is one small map on the
    wire, not 256 tagged ones. unwrap turns it back into UserReplies on the receiving side."""

    uids: List[int]
    texts: List[str]
    finished: List[bool]
    finish_reasons: List[str]  # "" where there is none
    prompt_tokens: List[int]
    completion_tokens: List[int]
    logprobs: Dict[int, List[TokenLogprob]] = field(default_factory=dict)  # chapter 24: by row, for those that asked

    @classmethod
    def pack(cls, replies: List[UserReply]) -> UserReplyBatch:
        return cls([r.uid for r in replies], [r.incremental_output for r in replies], [r.finished for r in replies],
                   [r.finish_reason or "" for r in replies], [r.prompt_tokens for r in replies],
                   [r.completion_tokens for r in replies],
                   {i: r.logprobs for i, r in enumerate(replies) if r.logprobs is not None})

    def unpack(self) -> List[UserReply]:
        out = [UserReply(uid, text, done, reason or None, prompt, completion) for uid, text, done, reason, prompt,
               completion in zip(self.uids, self.texts, self.finished, self.finish_reasons, self.prompt_tokens,
                                 self.completion_tokens)]
        for i, logprobs in self.logprobs.items():
            out[i].logprobs = logprobs
        return out


def pack_replies(msgs: List[BaseFrontendMsg]) -> List[BaseFrontendMsg]:
    """The messages of one frame with their UserReplies packed into one UserReplyBatch, which comes first (every
    other message keeps its order after it: a status report follows the tokens sent before it)."""
    replies = [m for m in msgs if type(m) is UserReply]
    if len(replies) < 2:
        return msgs
    return [UserReplyBatch.pack(replies), *(m for m in msgs if type(m) is not UserReply)]


@dataclass
class ErrorReply(BaseFrontendMsg):
    uid: int
    message: str  # the request was refused (bad prompt, too long for the engine): nothing ran
    param: str = "prompt"  # the request field at fault (chapter 24: also logit_bias)


@dataclass
class StatusReply(BaseFrontendMsg):
    uid: int
    status: Dict[str, int]
