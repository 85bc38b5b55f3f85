"""POST /v1/completions: OpenAI's legacy completions, the text of a choice in its `text` field.

Chapter 24: choices by index, and log-probabilities in the legacy shape: parallel lists `tokens`, `token_logprobs`,
`top_logprobs` (a map of token text to log-probability per token) and `text_offset` (where each token starts in the
choice's text).
"""

from __future__ import annotations

from minisgl.message import UserReply
from minisgl.message.frontend import TokenLogprob
from minisgl.server.frontend import Frontend
from minisgl.server.protocol import CompletionRequest
from minisgl.server.serving import OpenAIServing, usage_of


class OpenAIServingCompletion(OpenAIServing):
    id_prefix = "cmpl"
    object = chunk_object = "text_completion"

    def __init__(self, frontend: Frontend, model: str, req: CompletionRequest) -> None:
        super().__init__(frontend, model, req)
        self._offsets: dict[int, int] = {}  # choice -> characters of its text so far (text_offset)

    def full(self, texts: list[str], replies: list[UserReply], logprobs: list[list[TokenLogprob] | None]) -> dict:
        choices = [{"index": i, "text": text, "logprobs": self.logprobs(lps, i), "finish_reason": last.finish_reason}
                   for i, (text, last, lps) in enumerate(zip(texts, replies, logprobs))]
        return self.body(self.object, choices, usage_of(*replies))

    def chunk(self, text: str | None, finish_reason: str | None, first: bool = False, index: int = 0,
              logprobs: list[TokenLogprob] | None = None) -> dict:
        choice = {"index": index, "text": text or "", "logprobs": self.logprobs(logprobs, index),
                  "finish_reason": finish_reason}
        return self.body(self.chunk_object, [choice])

    def logprobs(self, entries: list[TokenLogprob] | None, index: int = 0) -> dict | None:
        if entries is None:
            return None
        offsets, at = [], self._offsets.get(index, 0)
        for e in entries:
            offsets.append(at)
            at += len(e.token)
        self._offsets[index] = at
        return {"tokens": [e.token for e in entries], "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [dict(zip(e.top_tokens, e.top_logprobs)) for e in entries], "text_offset": offsets}
