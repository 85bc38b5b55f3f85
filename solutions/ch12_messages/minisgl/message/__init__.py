"""Messages between the serving processes, one family per receiver, and their msgpack wire format."""

from .backend import AbortBackendMsg, BaseBackendMsg, BatchBackendMsg, ExitMsg, UserMsg
from .frontend import BaseFrontendMsg, BatchFrontendMsg, UserReply
from .tokenizer import AbortMsg, BaseTokenizerMsg, BatchTokenizerMsg, DetokenizeMsg, TokenizeMsg
from .utils import WIRE_VERSION, MessageError, decode_message, encode_message

__all__ = [
    "AbortMsg", "AbortBackendMsg", "BaseBackendMsg", "BatchBackendMsg", "ExitMsg", "UserMsg",
    "BaseTokenizerMsg", "BatchTokenizerMsg", "DetokenizeMsg", "TokenizeMsg",
    "BaseFrontendMsg", "BatchFrontendMsg", "UserReply",
    "MessageError", "WIRE_VERSION", "decode_message", "encode_message",
]
