"""Chapter 32: the grammar a `tool_choice` puts on the answer, built with chapter 25's machinery (xgrammar).

With "required" or a named function the answer must be calls and nothing else, each one parsing against its
function's schema: one EBNF grammar, handed to the engine like a request's own `ebnf` (chapter 25 compiles it and
masks the logits). A call is the Hermes block the parser reads,

    root      ::= tool_call ("\\n" tool_call){0, 3}       (one call only with parallel_tool_calls false)
    tool_call ::= "<tool_call>\\n" call_json "\\n</tool_call>"

and call_json is the JSON schema {"name": <the function's name>, "arguments": <its parameters>} (any of the functions
for "required"), which xgrammar turns into EBNF rules. Its JSON is compact (xgrammar's any_whitespace off): a model
cannot spend its tokens on spaces. Calls are capped at MAX_PARALLEL_CALLS: a grammar whose calls could go on forever
lets a model that repeats itself (greedy decoding often does) run to max_tokens and end mid-call.
"""

from __future__ import annotations

import json
import re

from minisgl.server.function_call.tool_parser import CALL_END, CALL_START
from minisgl.server.function_call.tools import Function, ToolError

MAX_PARALLEL_CALLS = 4


def call_schema(function: Function) -> dict:
    """The JSON schema of one call of `function`: its name, then arguments following its parameters."""
    return {"type": "object", "properties": {"name": {"const": function.name}, "arguments": function.parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def schema_ebnf(schema: dict, rule: str) -> str:
    """xgrammar's EBNF for a JSON schema, its root rule renamed `rule` (a ValueError if the schema is not one xgrammar
    can follow). The other rules keep their names (root_1, basic_string, ...): only `root` itself is renamed."""
    import xgrammar as xgr

    try:
        grammar = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False)
    except (RuntimeError, ValueError, TypeError) as e:
        raise ValueError(re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", str(e)).strip()) from None
    return re.sub(r"\broot\b", rule, str(grammar))


def check_schemas(functions: list[Function]) -> None:
    """A ToolError naming the first function whose parameters xgrammar cannot follow."""
    for i, f in enumerate(functions):
        try:
            schema_ebnf(call_schema(f), "call_json")
        except ValueError as e:
            raise ToolError(f"tools[{i}].function.parameters is not a JSON schema this server can follow: {e}",
                            "tools") from None


def tool_call_grammar(functions: list[Function], choice: str, parallel: bool) -> str | None:
    """The EBNF grammar for `choice` ("none", "auto", "required" or a function's name), or None where the answer is
    free ("none", "auto")."""
    # TODO(ch32): no grammar for "none" and "auto". Otherwise the functions that may be called (all of them for
    # "required", the named one only), call_json: schema_ebnf of {"anyOf": [call_schema(f), ...]} (one function:
    # its call_schema), a tool_call rule wrapping it in the tags, and a root of one call, or of 1 to
    # MAX_PARALLEL_CALLS calls separated by "\n" when `parallel` (a named function: always one call).
    raise NotImplementedError("TODO(ch32): tool_call_grammar")
