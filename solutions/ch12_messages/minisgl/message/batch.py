"""Batch messages: many messages in one frame. A sender packs what it has with `batched`; a receiver flattens what
it got with `unwrap`, so that it only ever handles one message at a time."""

from __future__ import annotations

from .backend import BatchBackendMsg
from .frontend import BatchFrontendMsg, UserReplyBatch
from .tokenizer import BatchTokenizerMsg

BATCH_TYPES = (BatchBackendMsg, BatchFrontendMsg, BatchTokenizerMsg)


def unwrap(msg) -> list:
    """The messages one frame carries, in order: a batch message is flattened (batches may nest, an empty one
    carries nothing), a UserReplyBatch becomes its UserReplies, any other message is a list of one."""
    if isinstance(msg, BATCH_TYPES):
        return [m for inner in msg.data for m in unwrap(inner)]
    if isinstance(msg, UserReplyBatch):
        return msg.unpack()
    return [msg]


def batched(msgs: list, batch_type: type):
    """One frame for a non-empty list of messages: the message itself when there is one, else a `batch_type`."""
    return msgs[0] if len(msgs) == 1 else batch_type(msgs)
