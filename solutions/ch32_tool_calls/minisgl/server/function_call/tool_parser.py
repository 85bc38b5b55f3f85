"""Chapter 32: the model's tool calls, found in its text, whole or as it streams.

The format is the Hermes one that Qwen2.5 and Qwen3 are trained on (SGLang's `qwen25` and `hermes` parsers, vLLM's
`hermes`): each call is a JSON object with the function's name first and its arguments second, between tags,

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

and any text outside the tags is the answer's content. `arguments` is handed to the client as the model wrote it (a
JSON string, as OpenAI's `function.arguments` is): the text between `"arguments":` and the object's last `}`. A
block whose opening does not name a function is not a call; it stays in the content as written.

Streaming has one rule that matters: text that may be the start of a tag is held back until the next piece says
whether it is one, so a client never sees `<tool_` as content. The same holds for the object's last `}` and the
whitespace around it, which are not part of the arguments: the streamed arguments are always a prefix of the whole
text's, and a finished stream reassembles to exactly what `parse_tool_calls` finds in the whole text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CALL_START, CALL_END = "<tool_call>", "</tool_call>"
# The opening of a call's object, up to where its arguments start: {"name": "f", "arguments":
CALL_HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]+)"\s*,\s*"arguments"\s*:')
OBJECT_END = re.compile(r"\s*\}?\s*\Z")  # what ends the call's object after its arguments: spaces, one }, spaces


@dataclass
class ToolCall:
    name: str
    arguments: str  # the arguments' JSON text, as written


def partial_tag_len(text: str, tag: str) -> int:
    """The length of the longest end of `text` that is the start of `tag` but not all of it: the characters a stream
    must hold back, because the next piece may complete the tag. partial_tag_len("ok <tool_", "<tool_call>") == 6."""
    # TODO(ch32): the longest k < len(tag) such that text ends with tag[:k] (0 when none does).
    # >>> solution
    for k in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0
    # <<< solution


def call_of_block(body: str) -> ToolCall | None:
    """The call a `<tool_call>` block holds (the text between its tags), or None when it names no function."""
    header = CALL_HEADER.match(body)
    if header is None:
        return None
    arguments = body[header.end():].lstrip()
    return ToolCall(header.group(1), arguments[:OBJECT_END.search(arguments).start()])


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """The content and the calls of a whole answer. Content is the text outside the call blocks, in order; when the
    answer has calls and that text is only whitespace, the content is "". An opened block never closed (the answer
    was cut) is a call if its opening names one, as the stream would have reported it."""
    # TODO(ch32): walk the text block by block: the text before each CALL_START is content; the block's body runs to
    # its CALL_END (or to the end of the text); call_of_block(body) is the call, or None: then the block, tags and
    # all, is content. Several blocks are several calls. Content of only whitespace beside calls is "".
    # >>> solution
    content, calls, pos = [], [], 0
    while True:
        start = text.find(CALL_START, pos)
        if start < 0:
            content.append(text[pos:])
            break
        content.append(text[pos:start])
        body_start = start + len(CALL_START)
        end = text.find(CALL_END, body_start)
        stop = len(text) if end < 0 else end + len(CALL_END)
        call = call_of_block(text[body_start:len(text) if end < 0 else end])
        if call is None:
            content.append(text[start:stop])
        else:
            calls.append(call)
        pos = stop
        if end < 0:
            break
    joined = "".join(content)
    return ("" if calls and not joined.strip() else joined), calls
    # <<< solution


@dataclass
class ToolDelta:
    """What one piece of a stream adds: content text, and for the calls, (index, name or None, arguments text)
    pieces; a name starts a new call."""

    content: str = ""
    calls: list[tuple[int, str | None, str]] | None = None

    def add_call(self, index: int, name: str | None, arguments: str) -> None:
        self.calls = (self.calls or []) + [(index, name, arguments)]


class ToolCallStream:
    """Finds the calls in an answer as it streams: feed() each piece of text, finish() at the end. Each returns a
    ToolDelta with only what is certain: content that cannot be the start of a tag, a call's name once its opening
    is complete, its arguments up to what may still be the object's end."""

    def __init__(self) -> None:
        self.buffer = ""  # text not yet handed out: after the last block, or the current block's body
        self.in_block = False
        self.calls = 0  # calls started (the next one's index)
        self.named = False  # the current block's opening named a function (its call was started)
        self.sent_args = 0  # characters of the current call's arguments handed out
        self.content_sent = False
        self.spaces = ""  # whitespace held back: content of only whitespace beside calls is dropped

    def feed(self, text: str) -> ToolDelta:
        self.buffer += text
        delta = ToolDelta()
        while self._step(delta):
            pass
        return delta

    def finish(self) -> ToolDelta:
        """The end of the answer: what was held back goes out (an unclosed block counts as closed)."""
        delta = ToolDelta()
        if self.in_block:
            self._close_block(self.buffer, delta, closed=False)
        else:
            self._content(self.buffer, delta)
        self.buffer = ""
        if self.spaces and (self.content_sent or not self.calls):
            delta.content += self.spaces
            self.spaces = ""
        return delta

    def _step(self, delta: ToolDelta) -> bool:
        """Hand out what the buffer makes certain; True when a tag was passed (look again)."""
        if not self.in_block:
            start = self.buffer.find(CALL_START)
            if start < 0:
                keep = partial_tag_len(self.buffer, CALL_START)
                self._content(self.buffer[:len(self.buffer) - keep], delta)
                self.buffer = self.buffer[len(self.buffer) - keep:]
                return False
            self._content(self.buffer[:start], delta)
            self.buffer = self.buffer[start + len(CALL_START):]
            self.in_block, self.named, self.sent_args = True, False, 0
            return True
        end = self.buffer.find(CALL_END)
        if end >= 0:
            self._close_block(self.buffer[:end], delta, closed=True)
            self.buffer, self.in_block = self.buffer[end + len(CALL_END):], False
            return True
        body = self.buffer[:len(self.buffer) - partial_tag_len(self.buffer, CALL_END)]
        header = CALL_HEADER.match(body)
        if header is not None:
            if not self.named:
                self.named = True
                delta.add_call(self.calls, header.group(1), "")
                self.calls += 1
            arguments = body[header.end():].lstrip()
            self._arguments(arguments[:OBJECT_END.search(arguments).start()], delta)
        return False

    def _close_block(self, body: str, delta: ToolDelta, closed: bool) -> None:
        call = call_of_block(body)
        if call is None:  # not a call: the block is content as written
            self._content(CALL_START + body + (CALL_END if closed else ""), delta)
            return
        if not self.named:
            delta.add_call(self.calls, call.name, "")
            self.calls += 1
        self._arguments(call.arguments, delta)
        self.named = False

    def _arguments(self, arguments: str, delta: ToolDelta) -> None:
        if len(arguments) > self.sent_args:
            delta.add_call(self.calls - 1, None, arguments[self.sent_args:])
            self.sent_args = len(arguments)

    def _content(self, text: str, delta: ToolDelta) -> None:
        text = self.spaces + text
        self.spaces = ""
        if not text.strip():  # whitespace waits: it is dropped if it only separates calls
            self.spaces = text
            return
        body = text.rstrip()
        self.spaces = text[len(body):]
        delta.content += body
        self.content_sent = True
