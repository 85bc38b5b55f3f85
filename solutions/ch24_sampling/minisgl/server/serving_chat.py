"""POST /v1/chat/completions: the assistant's answer as a `message`, streamed as `delta`s.

A stream's first chunk of each choice names the role (`{"role": "assistant", "content": ""}`) and the ones after it
carry only their text, as OpenAI's server sends them. Chapter 24: choices by index, and log-probabilities as
`logprobs.content`, one object per token with its `token`, `logprob`, UTF-8 `bytes` and `top_logprobs`.
"""

from __future__ import annotations

from minisgl.message import UserReply
from minisgl.message.frontend import TokenLogprob
from minisgl.server.serving import OpenAIServing, usage_of


class OpenAIServingChat(OpenAIServing):
    id_prefix = "chatcmpl"
    object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def full(self, texts: list[str], replies: list[UserReply], logprobs: list[list[TokenLogprob] | None]) -> dict:
        choices = [{"index": i, "message": {"role": "assistant", "content": text}, "logprobs": self.logprobs(lps, i),
                    "finish_reason": last.finish_reason}
                   for i, (text, last, lps) in enumerate(zip(texts, replies, logprobs))]
        return self.body(self.object, choices, usage_of(*replies))

    def chunk(self, text: str | None, finish_reason: str | None, first: bool = False, index: int = 0,
              logprobs: list[TokenLogprob] | None = None) -> dict:
        delta = ({"role": "assistant", "content": ""} if first else {}) | ({"content": text} if text else {})
        choice = {"index": index, "delta": delta, "logprobs": self.logprobs(logprobs, index),
                  "finish_reason": finish_reason}
        return self.body(self.chunk_object, [choice])

    def logprobs(self, entries: list[TokenLogprob] | None, index: int = 0) -> dict | None:
        if entries is None:
            return None
        return {"content": [{"token": e.token, "logprob": e.logprob, "bytes": list(e.token.encode()),
                             "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())}
                                              for t, v in zip(e.top_tokens, e.top_logprobs)]}
                            for e in entries], "refusal": None}
