"""POST /v1/chat/completions: the assistant's answer as a `message`, streamed as `delta`s.

A stream's first chunk names the role (`{"role": "assistant", "content": ""}`) and the ones after it carry only
their text, as OpenAI's server sends them.
"""

from __future__ import annotations

from minisgl.message import UserReply
from minisgl.server.serving import OpenAIServing, usage_of


class OpenAIServingChat(OpenAIServing):
    id_prefix = "chatcmpl"
    object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def full(self, text: str, reply: UserReply) -> dict:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": reply.finish_reason}
        return self.body(self.object, [choice], usage_of(reply))

    def chunk(self, text: str | None, finish_reason: str | None, first: bool = False) -> dict:
        delta = ({"role": "assistant", "content": ""} if first else {}) | ({"content": text} if text else {})
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self.body(self.chunk_object, [choice])
