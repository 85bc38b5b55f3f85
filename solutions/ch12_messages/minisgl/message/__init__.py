"""Messages between the serving processes, one family per receiver, and their msgpack wire format."""

from .backend import AbortBackendMsg, BaseBackendMsg, BatchBackendMsg, ExitMsg, GetStatusMsg, HoldMsg, UserMsg
from .batch import batched, unwrap
from .frontend import (BaseFrontendMsg, BatchFrontendMsg, ErrorReply, StatusReply, UserReply, UserReplyBatch,
                       pack_replies)
from .tokenizer import (AbortMsg, BaseTokenizerMsg, BatchTokenizerMsg, DetokenizeMsg, ErrorMsg, StatusMsg,
                        TokenizeMsg)
from .utils import WIRE_VERSION, MessageError, decode_message, encode_message

__all__ = [
    "AbortMsg", "AbortBackendMsg", "BaseBackendMsg", "BatchBackendMsg", "ExitMsg", "GetStatusMsg", "HoldMsg", "UserMsg",
    "BaseTokenizerMsg", "BatchTokenizerMsg", "DetokenizeMsg", "ErrorMsg", "StatusMsg", "TokenizeMsg",
    "BaseFrontendMsg", "BatchFrontendMsg", "ErrorReply", "StatusReply", "UserReply", "UserReplyBatch", "pack_replies",
    "MessageError", "WIRE_VERSION", "decode_message", "encode_message", "batched", "unwrap",
]
