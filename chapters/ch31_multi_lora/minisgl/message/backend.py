"""Messages the scheduler receives: user requests (token ids ready), aborts, status queries, the order to exit, and
the hold that tests and debugging use to build a state step by step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List

import torch

from minisgl.core import SamplingParams

from .utils import decode_message, encode_message


@dataclass
class BaseBackendMsg:
    @staticmethod
    def encoder(msg: BaseBackendMsg) -> dict:
        return encode_message(msg)

    @staticmethod
    def decoder(data: Any) -> BaseBackendMsg:
        return decode_message(data, BaseBackendMsg)


@dataclass
class BatchBackendMsg(BaseBackendMsg):
    data: List[BaseBackendMsg]


@dataclass
class ExitMsg(BaseBackendMsg):
    pass


@dataclass(eq=False)  # a tensor field: == would compare element-wise
class UserMsg(BaseBackendMsg):
    uid: int
    input_ids: torch.Tensor  # CPU 1-D int32: the tokenized prompt
    sampling_params: SamplingParams
    bootstrap_room: int | None = None  # chapter 29: names the request's KV transfer on both sides of a P/D pair


@dataclass
class AbortBackendMsg(BaseBackendMsg):
    uid: int


@dataclass
class GetStatusMsg(BaseBackendMsg):
    uid: int  # the reply (a StatusMsg) carries it back


@dataclass
class HoldMsg(BaseBackendMsg):
    """A test and debugging hook (SGLang's /pause_generation and /continue_generation do the same): the scheduler
    launches at most `steps` more batches, then holds (0: hold now; None: run freely again). A held scheduler still
    takes messages: requests queue, aborts and status queries are answered. A StatusMsg answers once that is in
    effect: the batches run and nothing is in flight."""

    uid: int  # the reply (a StatusMsg) carries it back
    steps: int | None


@dataclass
class LoraAdapterMsg(BaseBackendMsg):
    """Chapter 31: load a LoRA adapter (lora_path given) or unload it (None). A StatusMsg answers once it is done,
    an ErrorMsg naming the problem when it is refused."""

    uid: int
    lora_name: str
    lora_path: str | None = None
