"""Messages the tokenizer/detokenizer process receives: text to tokenize (from the front end), tokens to
detokenize (from the scheduler), and aborts."""

from __future__ import annotations

from dataclasses import dataclass
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
    uid: int
    next_token: int
    finished: bool


@dataclass
class TokenizeMsg(BaseTokenizerMsg):
    uid: int
    text: str | List[Dict[str, str]]  # a prompt, or chat messages [{"role": ..., "content": ...}]
    sampling_params: SamplingParams


@dataclass
class AbortMsg(BaseTokenizerMsg):
    uid: int
