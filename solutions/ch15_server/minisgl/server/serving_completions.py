"""POST /v1/completions: OpenAI's legacy completions, the text of a choice in its `text` field."""

from __future__ import annotations

from minisgl.message import UserReply
from minisgl.server.serving import OpenAIServing, usage_of


class OpenAIServingCompletion(OpenAIServing):
    id_prefix = "cmpl"
    object = chunk_object = "text_completion"

    def full(self, text: str, reply: UserReply) -> dict:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reply.finish_reason}
        return self.body(self.object, [choice], usage_of(reply))

    def chunk(self, text: str | None, finish_reason: str | None, first: bool = False) -> dict:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        return self.body(self.chunk_object, [choice])
