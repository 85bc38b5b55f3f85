"""POST /v1/chat/completions: the assistant's answer as a `message`, streamed as `delta`s.

A stream's first chunk of each choice names the role (`{"role": "assistant", "content": ""}`) and the ones after it
carry only their text, as OpenAI's server sends them. Chapter 24: choices by index, and log-probabilities as
`logprobs.content`, one object per token with its `token`, `logprob`, UTF-8 `bytes` and `top_logprobs`.

Chapter 32: on a server with a tool-call parser the answer's calls become `tool_calls` ({"id": "call_...", "type":
"function", "function": {"name", "arguments"}}, arguments a JSON string) and the finish reason "tool_calls"; with a
reasoning parser its thinking becomes `reasoning_content`. Streamed, a call's first delta carries its index, id and
name, the next ones pieces of its arguments, as OpenAI streams them; text that may still turn out to be a tag waits
for the next piece (function_call/).
"""

from __future__ import annotations

import secrets

from minisgl.message import UserReply
from minisgl.message.frontend import TokenLogprob
from minisgl.message.tokenizer import TokenizeMsg
from minisgl.server.function_call.reasoning import ReasoningStream, split_reasoning
from minisgl.server.function_call.tool_parser import ToolCallStream, parse_tool_calls
from minisgl.server.protocol import ChatPlan, chat_plan, to_tokenize_msg
from minisgl.server.serving import OpenAIServing, sse, usage_of


def call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


class ChoiceStream:
    """One streamed choice through the parsers its plan asks for: the reasoning split first, then the tool calls in
    what is left."""

    def __init__(self, plan: ChatPlan) -> None:
        self.plan = plan
        self.reasoning = None if plan.thinking is None else ReasoningStream(plan.thinking, plan.stream_reasoning)
        self.tools = ToolCallStream() if plan.tool_choice not in (None, "none") else None
        self.ids: list[str] = []  # the calls' ids, by index

    def delta(self, text: str, final: bool) -> dict:
        """The delta's fields for this piece of text (final: the answer ended, hand out what was held back)."""
        reasoning, content = ("", text) if self.reasoning is None else self.reasoning.feed(text)
        if final and self.reasoning is not None:
            more = self.reasoning.finish()
            reasoning, content = reasoning + more[0], content + more[1]
        fields = {"reasoning_content": reasoning} if reasoning else {}
        if self.tools is None:
            return fields | ({"content": content} if content else {})
        found = self.tools.feed(content)
        if final:
            end = self.tools.finish()
            found.content += end.content
            found.calls = (found.calls or []) + (end.calls or []) or None
        calls: list[dict] = []
        for index, name, arguments in found.calls or []:
            if self.plan.max_calls is not None and index >= self.plan.max_calls:
                continue  # parallel_tool_calls false: the first call only
            if name is not None:
                self.ids.append(call_id())
                calls.append({"index": index, "id": self.ids[index], "type": "function",
                              "function": {"name": name, "arguments": arguments}})
            elif calls and calls[-1]["index"] == index:  # one piece of text gave several: one entry per call
                calls[-1]["function"]["arguments"] += arguments
            else:
                calls.append({"index": index, "function": {"arguments": arguments}})
        return fields | ({"content": found.content} if found.content else {}) | ({"tool_calls": calls} if calls else {})

    @property
    def called(self) -> bool:
        return bool(self.ids)


class OpenAIServingChat(OpenAIServing):
    id_prefix = "chatcmpl"
    object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def __init__(self, frontend, model: str, req, tool_call_parser: str | None = None,
                 reasoning_parser: str | None = None) -> None:
        super().__init__(frontend, model, req)
        self.parsers = (tool_call_parser, reasoning_parser)
        self.plan: ChatPlan | None = None
        self.streams: dict[int, ChoiceStream] = {}

    def tokenize_msg(self, uid: int) -> TokenizeMsg:
        self.plan = chat_plan(self.req, *self.parsers)
        return to_tokenize_msg(uid, self.req, self.plan)

    @property
    def parsing(self) -> bool:
        return self.plan is not None and (self.plan.tool_choice not in (None, "none") or self.plan.thinking is not None)

    def message(self, text: str) -> tuple[dict, bool]:
        """The whole answer's message, and whether it called tools."""
        plan, reasoning, calls = self.plan, None, []
        if self.parsing and plan.thinking is not None:
            reasoning, text = split_reasoning(text, plan.thinking)
        if self.parsing and plan.tool_choice not in (None, "none"):
            text, calls = parse_tool_calls(text)
            calls = calls[:plan.max_calls]
        message = {"role": "assistant", "content": None if calls and not text else text}
        if self.parsing and plan.thinking is not None:
            message["reasoning_content"] = reasoning or None
        if calls:
            message["tool_calls"] = [{"id": call_id(), "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        return message, bool(calls)

    def full(self, texts: list[str], replies: list[UserReply], logprobs: list[list[TokenLogprob] | None]) -> dict:
        choices = []
        for i, (text, last, lps) in enumerate(zip(texts, replies, logprobs)):
            message, called = self.message(text)
            choices.append({"index": i, "message": message, "logprobs": self.logprobs(lps, i),
                            "finish_reason": finish_reason_of(last.finish_reason, called)})
        return self.body(self.object, choices, usage_of(*replies))

    def chunk(self, text: str | None, finish_reason: str | None, first: bool = False, index: int = 0,
              logprobs: list[TokenLogprob] | None = None) -> dict:
        if self.parsing:
            stream = self.streams.setdefault(index, ChoiceStream(self.plan))
            fields = stream.delta(text or "", final=finish_reason is not None)
            delta = ({"role": "assistant", "content": ""} if first else {}) | fields
            if finish_reason is not None:
                finish_reason = finish_reason_of(finish_reason, stream.called)
        else:
            delta = ({"role": "assistant", "content": ""} if first else {}) | ({"content": text} if text else {})
        choice = {"index": index, "delta": delta, "logprobs": self.logprobs(logprobs, index),
                  "finish_reason": finish_reason}
        return self.body(self.chunk_object, [choice])

    def text_event(self, text: str, index: int = 0) -> str:
        if self.parsing:  # each piece goes through the parsers: no template
            return sse(self.chunk(text, None, index=index))
        return super().text_event(text, index)

    def logprobs(self, entries: list[TokenLogprob] | None, index: int = 0) -> dict | None:
        if entries is None:
            return None
        return {"content": [{"token": e.token, "logprob": e.logprob, "bytes": list(e.token.encode()),
                             "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())}
                                              for t, v in zip(e.top_tokens, e.top_logprobs)]}
                            for e in entries], "refusal": None}


def finish_reason_of(reason: str, called: bool) -> str:
    """"tool_calls" for an answer that ended by itself with calls (one cut by max_tokens stays "length")."""
    return "tool_calls" if called and reason == "stop" else reason
