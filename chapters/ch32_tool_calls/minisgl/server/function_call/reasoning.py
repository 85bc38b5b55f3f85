"""Chapter 32: a reasoning model's thinking, split from its answer (`reasoning_content` beside `content`).

Qwen3 and DeepSeek-R1 think first, between `<think>` and `</think>`, then answer. Their chat templates may write the
opening tag into the prompt (DeepSeek-R1's always does; Qwen3's thinking-only models too), so the answer can start
inside the thinking with no `<think>` of its own: a parser that is told thinking is on treats the text before
`</think>` as reasoning even without the opening tag, as SGLang's `--reasoning-parser qwen3` and `deepseek-r1` do.
Qwen3's hybrid models turn thinking off with `chat_template_kwargs: {"enable_thinking": false}`; then only an answer
that opens `<think>` itself has reasoning. An answer cut inside its thinking is all reasoning. The content starts
after the closing tag, without the whitespace that follows it.
"""

from __future__ import annotations

from minisgl.server.function_call.tool_parser import partial_tag_len

THINK_START, THINK_END = "<think>", "</think>"
REASONING_PARSERS = ("qwen3", "deepseek-r1")  # SGLang's names; both use these tags


def thinks_by_default(parser: str, enable_thinking: bool | None) -> bool:
    """Whether an answer starts inside its thinking: DeepSeek-R1's template always opens it; Qwen3 thinks unless the
    request turned thinking off (enable_thinking false)."""
    return parser == "deepseek-r1" or enable_thinking is not False


def split_reasoning(text: str, thinking: bool) -> tuple[str | None, str]:
    """(reasoning or None, content) of a whole answer. `thinking`: the answer starts inside its thinking."""
    # TODO(ch32): an answer that starts (after whitespace) with THINK_START thinks from there; otherwise it thinks
    # from its first character only when `thinking` is on, and is all content (None, text) when it is off. The
    # reasoning runs to the first THINK_END (or to the end: a cut answer); the content is what follows THINK_END,
    # its leading whitespace dropped.
    raise NotImplementedError("TODO(ch32): split_reasoning")


class ReasoningStream:
    """The same split as the answer streams: feed() each piece, finish() at the end; each returns (reasoning,
    content) text that is certain. A piece that may be the start of `<think>` or `</think>` waits for the next one.
    With stream_reasoning False the reasoning is handed out in one piece when it ends (SGLang's field)."""

    def __init__(self, thinking: bool, stream_reasoning: bool = True) -> None:
        self.thinking, self.stream_reasoning = thinking, stream_reasoning
        self.state = "start"  # start: deciding whether the answer opens <think>; then reasoning, content
        self.buffer = ""  # text held back
        self.reasoning = ""  # reasoning not yet handed out (stream_reasoning False)

    def feed(self, text: str) -> tuple[str, str]:
        self.buffer += text
        reasoning, content = "", ""
        if self.state == "start":
            opened = self.buffer.lstrip()
            if opened.startswith(THINK_START):
                self.buffer, self.state = opened[len(THINK_START):], "reasoning"
            elif THINK_START.startswith(opened):
                return "", ""  # whitespace, or maybe the tag: wait
            else:
                self.state = "reasoning" if self.thinking else "content"
        if self.state == "reasoning":
            end = self.buffer.find(THINK_END)
            if end < 0:
                keep = partial_tag_len(self.buffer, THINK_END)
                reasoning, self.buffer = self.buffer[:len(self.buffer) - keep], self.buffer[len(self.buffer) - keep:]
                return self._reasoning(reasoning, ended=False), ""
            reasoning, self.buffer, self.state = self.buffer[:end], self.buffer[end + len(THINK_END):], "after"
            reasoning = self._reasoning(reasoning, ended=True)
        if self.state == "after":  # the content starts at its first non-space character
            self.buffer = self.buffer.lstrip()
            if not self.buffer:
                return reasoning, ""
            self.state = "content"
        content, self.buffer = self.buffer, ""
        return reasoning, content

    def finish(self) -> tuple[str, str]:
        """The end of the answer: what was held back goes out where it belongs."""
        held, self.buffer = self.buffer, ""
        if self.state == "start":  # a short answer that was only the start of <think>, or whitespace
            self.state = "reasoning" if self.thinking else "content"
        if self.state == "reasoning":
            return self._reasoning(held, ended=True), ""
        return "", "" if self.state == "after" else held

    def _reasoning(self, text: str, ended: bool) -> str:
        if self.stream_reasoning:
            return text
        self.reasoning += text
        if not ended:
            return ""
        out, self.reasoning = self.reasoning, ""
        return out
