"""The OpenAI API's request bodies, and the step from a request to a TokenizeMsg (or an APIError naming the field).

Requests are parsed strictly (a string is not a number, a bool is not an integer) and unknown fields are refused:
a parameter the engine would ignore is a 400 naming it, never dropped in silence. Parameters OpenAI defines but
the engine does not support (best_of > 1, echo, suffix) are accepted only at their do-nothing values.
Chapter 24 adds the sampling API: n, logprobs (and top_logprobs), presence_penalty, frequency_penalty and
logit_bias under OpenAI's names and shapes, repetition_penalty, min_p and min_tokens under SGLang's and vLLM's.
Chapter 25 adds structured output: OpenAI's response_format (json_object, json_schema) on both endpoints, and
SGLang's regex and ebnf fields.
Chapter 27 accepts the SGLang-native fields sglang-router adds to every request it forwards (no_stop_trim,
skip_special_tokens, return_hidden_states; on chats continue_final_message, separate_reasoning, stream_reasoning):
at the values that ask for what this server does anyway; any other value is a 400 naming the field.
Chapter 29 accepts the three fields sglang-router adds in prefill/decode mode (bootstrap_host, bootstrap_port,
bootstrap_room): the room names the request's KV transfer on both servers; a server not in a disaggregation mode
refuses a room with a 400.
Chapter 32 serves `tools` and `tool_choice` (with `parallel_tool_calls`), `tool` messages and an assistant's
`tool_calls`, on a server started with --tool-call-parser; and, with --reasoning-parser, `separate_reasoning`,
`stream_reasoning` and `chat_template_kwargs: {"enable_thinking": ...}` as SGLang means them (chat_plan). The
deprecated `functions` and `function_call` are refused: `tools` says the same.
Fields that change nothing in the answer are accepted, as SGLang and vLLM accept them: `user`, `store`,
`metadata`, `parallel_tool_calls` (without tools), `safety_identifier`, OpenAI's prompt-cache hints
(`prompt_cache_key`, `prompt_cache_retention`, `prompt_cache_options`: the prefix cache here needs none),
`prediction` (a predicted output makes OpenAI answer sooner, never differently), `stream_options.include_obfuscation`
(no padding is added to the stream), a message's `name` (passed to the chat template), an assistant message whose
`content` is null, and the `developer` role, which OpenAI's newer models use for what the others call `system`
(chat templates know only `system`). Text-only output, no reasoning effort, no verbosity level, no web search and no
moderation: `modalities`, `audio`, `reasoning_effort`, `verbosity`, `web_search_options` and `moderation` are
accepted at their do-nothing values only, `service_tier` at "auto" and "default" (there is one tier).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from minisgl.core import SamplingParams
from minisgl.message import TokenizeMsg
from minisgl.server.errors import APIError
from minisgl.server.function_call.grammar import check_schemas, tool_call_grammar
from minisgl.server.function_call.reasoning import thinks_by_default
from minisgl.server.function_call.tools import Function, ToolError, choice_of, functions_of, messages_with_tools


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(Strict):
    include_usage: bool = False
    include_obfuscation: bool = True  # OpenAI pads chunks to hide their lengths; this server sends them as they are


class FunctionCall(Strict):
    name: str
    arguments: str  # a JSON text, as the answer gave it


class MessageToolCall(Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None  # null only for an assistant turn (one that called tools)
    name: str | None = None  # the speaker's name: the chat template may use it
    tool_calls: list[MessageToolCall] | None = None  # chapter 32: an assistant turn's calls
    tool_call_id: str | None = None  # chapter 32: a tool message answers this call


class AbortRequest(Strict):
    """The body of POST /abort_request."""

    id: str  # the response id of the running request


class Common(Strict):
    """Fields both endpoints take."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float = 1.0  # OpenAI's default: give temperature 0 for greedy decoding
    top_p: float = 1.0
    top_k: int = -1  # an extension (vLLM and SGLang have it): -1 means no limit
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None  # an extension: more tokens that end the text
    ignore_eos: bool = False  # an extension: generate max_tokens whatever the model says
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None  # the client's own tag for the request: recorded nowhere, changes nothing
    # Chapter 24: the sampling API (SamplingParams checks the ranges).
    n: int = 1  # choices per request, each a request of its own (seeds seed, seed + 1, ...)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None  # token id (a string, as JSON keys are) -> bias in [-100, 100]
    repetition_penalty: float = 1.0  # SGLang's and vLLM's extension
    min_p: float = 0.0  # an extension
    min_tokens: int = 0  # an extension: no EOS, stop token or stop string before this many tokens
    # Chapter 25: structured output (at most one): OpenAI's response_format, SGLang's regex and ebnf.
    response_format: dict[str, Any] | None = None
    regex: str | None = None
    ebnf: str | None = None
    # Chapter 27: SGLang's fields that sglang-router sets on every request (see NOT_SUPPORTED for the values taken).
    no_stop_trim: bool = False  # False: a stop string is cut from the text (this server always cuts it)
    skip_special_tokens: bool = True  # True: special tokens are left out of the text (as this server's detokenizer)
    return_hidden_states: bool = False  # the model's hidden states in the answer: never returned here
    # Chapter 29: what sglang-router's prefill/decode mode adds: where the prefill server's bootstrap listens (the
    # decode server was paired with it at start-up: informative here) and the room, the transfer's name.
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None


class CompletionRequest(Common):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16  # OpenAI's default for completions
    logprobs: int | None = None  # the legacy API: the chosen token's and this many alternatives' (at most 5)
    echo: bool | None = None
    best_of: int | None = None
    suffix: str | None = None


class ChatCompletionRequest(Common):
    messages: list[Message]
    max_completion_tokens: int | None = None  # the newer name of max_tokens
    logprobs: bool = False
    top_logprobs: int | None = None  # alternatives per token (at most 20); needs logprobs
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    # Accepted and ignored: they change nothing in the answer.
    store: bool | None = None  # OpenAI keeps the completion for its dashboard; this server keeps nothing
    metadata: dict[str, str] | None = None  # tags for stored completions
    parallel_tool_calls: bool | None = None  # chapter 32: false allows one call per answer (default: several)
    # Chapter 27: SGLang's chat fields that sglang-router sets on every chat it forwards.
    continue_final_message: bool = False  # True would extend the last (assistant) message instead of answering it
    # Chapter 32, with --reasoning-parser: the thinking in `reasoning_content` (separate_reasoning), streamed as it
    # comes or in one piece at its end (stream_reasoning). Without the flag both values change nothing.
    separate_reasoning: bool = True
    stream_reasoning: bool = True
    chat_template_kwargs: dict[str, Any] | None = None  # chapter 32: {"enable_thinking": false} turns thinking off
    safety_identifier: str | None = None  # the client's tag for its end user, as `user`
    prompt_cache_key: str | None = None  # OpenAI's prompt-cache hints: the prefix cache finds shared prefixes itself
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None  # predicted output: OpenAI answers sooner when it matches, never otherwise
    # Accepted at their do-nothing values only (see NOT_SUPPORTED).
    service_tier: str | None = None
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    web_search_options: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None


# field -> the values that ask for nothing; anything else is refused with a 400
NOT_SUPPORTED = {
    "best_of": (None, 1), "echo": (None, False), "suffix": (None, ""),
    "functions": (None, []), "function_call": (None, "none"),  # chapter 32: the deprecated form of tools
    # chapter 27: SGLang's fields, at the values sglang-router sends (None: the endpoint has no such field)
    "no_stop_trim": (False,), "skip_special_tokens": (True,), "return_hidden_states": (False,),
    "continue_final_message": (None, False),
    "service_tier": (None, "auto", "default"), "modalities": (None, ["text"]), "audio": (None,),
    "reasoning_effort": (None,), "verbosity": (None,), "web_search_options": (None,), "moderation": (None,),
}
MAX_COMPLETION_LOGPROBS = 5  # OpenAI's limit for the legacy completions' logprobs


def check_supported(req: Common) -> None:
    for name, allowed in NOT_SUPPORTED.items():
        value = getattr(req, name, None)
        if not any(value == ok and isinstance(value, bool) == isinstance(ok, bool) for ok in allowed):
            raise APIError(400, f"{name}={value!r} is not supported by this server", param=name,
                           code="unsupported_parameter")
    if req.stream_options is not None and not req.stream:
        raise APIError(400, "stream_options needs stream=true", param="stream_options")


def prompt_of(req: CompletionRequest | ChatCompletionRequest, plan: ChatPlan | None = None) -> str | list:
    """The prompt as the tokenizer process takes it: text, token ids, or chat messages with text content (chapter
    32: with the plan's tools and the chat's calls and results rendered into them)."""
    if isinstance(req, ChatCompletionRequest):
        if not req.messages:
            raise APIError(400, "messages must not be empty", param="messages")
        messages = [_chat_message(m, i) for i, m in enumerate(req.messages)]
        if plan is None or plan.tool_choice is None:
            return messages
        try:
            return messages_with_tools(messages, plan.functions if plan.tool_choice != "none" else [])
        except ToolError as e:
            raise APIError(400, str(e), param=e.param) from None
    prompt = req.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise APIError(400, f"one prompt per request, got {len(prompt)}", param="prompt")
        prompt = prompt[0]
    if len(prompt) == 0:
        raise APIError(400, "the prompt is empty", param="prompt")
    return prompt


def _chat_message(m: Message, index: int) -> dict:
    """A message as the chat template takes it: developer -> system, a null assistant content -> "" (chapter 32: a
    tool message keeps its tool_call_id, an assistant's calls their OpenAI shape, for messages_with_tools)."""
    if m.content is None and m.role != "assistant":
        raise APIError(400, f"messages[{index}]: a {m.role} message needs a content", param=f"messages[{index}]")
    if (m.tool_calls is not None and m.role != "assistant") or (m.tool_call_id is not None) != (m.role == "tool"):
        raise APIError(400, f"messages[{index}]: tool_calls belong to assistant messages, a tool_call_id to tool "
                            f"messages (which need one)", param=f"messages[{index}]")
    message = {"role": "system" if m.role == "developer" else m.role,
               "content": "" if m.content is None else _text_content(m.content, index)}
    if m.name is not None:
        message["name"] = m.name
    if m.tool_calls:
        message["tool_calls"] = [c.model_dump() for c in m.tool_calls]
    if m.tool_call_id is not None:
        message["tool_call_id"] = m.tool_call_id
    return message


def _text_content(content: str | list[dict[str, Any]], index: int) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise APIError(400, f"messages[{index}]: only text content is supported", param=f"messages[{index}]")
        parts.append(part["text"])
    return "".join(parts)


def to_tokenize_msg(uid: int, req: CompletionRequest | ChatCompletionRequest, plan: ChatPlan | None = None
                    ) -> TokenizeMsg:
    """The message that starts the request in the tokenizer process, or an APIError naming the bad field. A chat
    with a plan (chapter 32's chat_plan) gets its tools in the prompt and its tool_choice's grammar."""
    check_supported(req)
    if isinstance(req, ChatCompletionRequest) and plan is None:
        plan = chat_plan(req)  # refuses what needs a parser this server does not run
    prompt = prompt_of(req, plan)
    max_tokens = req.max_tokens
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        if max_tokens is not None and max_tokens != req.max_completion_tokens:
            raise APIError(400, "max_tokens and max_completion_tokens differ", param="max_completion_tokens")
        max_tokens = req.max_completion_tokens
    fields = sampling_api_fields(req)
    if plan is not None and plan.grammar is not None:
        if any(fields.get(k) is not None for k in ("json_schema", "regex", "ebnf")):
            raise APIError(400, f"tool_choice {req.tool_choice!r} constrains the answer to tool calls: give no "
                                "response_format, regex or ebnf with it", param="tool_choice")
        fields["ebnf"] = plan.grammar
    try:
        params = SamplingParams(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, seed=req.seed,
                                ignore_eos=req.ignore_eos,
                                max_tokens=max(1, req.min_tokens) if max_tokens is None else max_tokens,
                                **fields)
    except ValueError as e:
        raise APIError(400, str(e), param=str(e).split(" ", 1)[0]) from None
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if any(s == "" for s in stop):
        raise APIError(400, "stop strings must not be empty", param="stop")
    room = req.bootstrap_room
    if room is not None and not 0 <= room < 2**63:
        raise APIError(400, f"bootstrap_room must be in [0, 2**63), got {room}", param="bootstrap_room")
    if room is not None and req.n != 1:  # n choices would be n requests under one room: one KV transfer names one
        raise APIError(400, "n > 1 is not supported with disaggregation (bootstrap_room names one request)", param="n")
    return TokenizeMsg(uid, prompt, params, stop, list(req.stop_token_ids or []), auto_max_tokens=max_tokens is None,
                       bootstrap_room=room)


def sampling_api_fields(req: CompletionRequest | ChatCompletionRequest) -> dict:
    """Chapter 24: the SamplingParams fields of the sampling API, from OpenAI's shapes (logit_bias keys are
    strings; the legacy completions' logprobs is a count, the chat's a flag with top_logprobs beside it)."""
    bias = {}
    for key, value in (req.logit_bias or {}).items():
        if not key.isdigit():  # int() would also take " 12", "+12" and "1_2"
            raise APIError(400, f"logit_bias keys are token ids, got {key!r}", param="logit_bias")
        bias[int(key)] = value
    if isinstance(req, ChatCompletionRequest):
        if req.top_logprobs is not None and not req.logprobs:
            raise APIError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
        logprobs, top = req.logprobs, req.top_logprobs or 0
    else:
        if req.logprobs is not None and not 0 <= req.logprobs <= MAX_COMPLETION_LOGPROBS:
            raise APIError(400, f"logprobs must be in [0, {MAX_COMPLETION_LOGPROBS}], got {req.logprobs}",
                           param="logprobs")
        logprobs, top = req.logprobs is not None, req.logprobs or 0
    return dict(**grammar_fields(req), n=req.n, presence_penalty=req.presence_penalty,
                frequency_penalty=req.frequency_penalty, repetition_penalty=req.repetition_penalty, min_p=req.min_p,
                logit_bias=bias, min_tokens=req.min_tokens, logprobs=logprobs, top_logprobs=top)


def grammar_fields(req: CompletionRequest | ChatCompletionRequest) -> dict:
    """Chapter 25: the grammar of a request as SamplingParams fields. response_format {"type": "json_object"} is
    any JSON object; {"type": "json_schema", "json_schema": {"name", "schema", ...}} that schema; "text" none."""
    fields = {}
    fmt = req.response_format
    if fmt is not None:
        kind = fmt.get("type")
        if kind == "json_object":
            fields["json_schema"] = '{"type": "object"}'
        elif kind == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise APIError(400, "response_format json_schema needs json_schema.schema, a JSON object",
                               param="response_format")
            fields["json_schema"] = json.dumps(schema)
        elif kind != "text":
            raise APIError(400, f"response_format type must be text, json_object or json_schema, got {kind!r}",
                           param="response_format")
    for name in ("regex", "ebnf"):
        if getattr(req, name) is not None:
            fields[name] = getattr(req, name)
    if len(fields) > 1:
        raise APIError(400, f"give one of response_format, regex and ebnf, got {', '.join(sorted(fields))}",
                       param="response_format")
    return fields


@dataclass
class ChatPlan:
    """Chapter 32: what a chat asks of the tool and reasoning parsers. tool_choice None: no tool parser runs (the
    server has none, or the request has no tools); thinking None: no reasoning split."""

    functions: list[Function]
    tool_choice: str | None = None  # "none", "auto", "required" or the forced function's name
    grammar: str | None = None  # the EBNF tool_choice puts on the answer
    max_calls: int | None = None  # parallel_tool_calls false: 1
    thinking: bool | None = None  # the answer starts inside its thinking
    stream_reasoning: bool = True


def chat_plan(req: ChatCompletionRequest, tool_call_parser: str | None = None,
              reasoning_parser: str | None = None) -> ChatPlan:
    """The plan of a chat on a server with these parsers (None: not started with the flag), or an APIError naming
    the field that needs a parser the server does not run or that cannot be served."""
    tool_history = [i for i, m in enumerate(req.messages) if m.role == "tool" or m.tool_calls]
    if tool_call_parser is None and (req.tools or tool_history):
        param = "tools" if req.tools else f"messages[{tool_history[0]}]"
        raise APIError(400, "tools and tool messages need a tool-call parser: start the server with "
                            "--tool-call-parser qwen25 (or hermes)", param=param)
    plan = ChatPlan([])
    try:
        plan.functions = functions_of(req.tools or [])
        check_schemas(plan.functions)
        choice = choice_of(req.tool_choice, plan.functions)
        if tool_call_parser is not None:
            plan.tool_choice = choice
            plan.grammar = tool_call_grammar(plan.functions, choice, req.parallel_tool_calls is not False)
            plan.max_calls = 1 if req.parallel_tool_calls is False else None
    except ToolError as e:
        raise APIError(400, str(e), param=e.param) from None
    kwargs = req.chat_template_kwargs
    if kwargs is not None:
        if reasoning_parser is None or set(kwargs) - {"enable_thinking"} or \
                not isinstance(kwargs.get("enable_thinking", True), bool):
            raise APIError(400, 'chat_template_kwargs takes {"enable_thinking": true or false} on a server started '
                                'with --reasoning-parser', param="chat_template_kwargs")
    if reasoning_parser is not None and req.separate_reasoning:
        plan.thinking = thinks_by_default(reasoning_parser, (kwargs or {}).get("enable_thinking"))
        plan.stream_reasoning = req.stream_reasoning
    return plan
