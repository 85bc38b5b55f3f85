"""Messages the scheduler receives: user requests (token ids ready), aborts, status queries and the order to exit."""

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


@dataclass
class AbortBackendMsg(BaseBackendMsg):
    uid: int


@dataclass
class GetStatusMsg(BaseBackendMsg):
    uid: int  # the reply (a StatusMsg) carries it back
