"""Chapter 32: a request's tools, checked, and how they reach the prompt.

OpenAI's `tools` are function definitions ({"type": "function", "function": {"name", "description", "parameters"}},
parameters a JSON schema); `tool_choice` is "none", "auto", "required" or {"type": "function", "function": {"name"}}.

The prompt: the bundled models' chat templates know nothing of tools, so the course renders them itself, in the
Hermes format Qwen2.5's and Qwen3's own templates use: the tools, one JSON object a line between `<tools>` tags,
and how to call them, at the end of the system message (one is added when the chat has none); an assistant turn's
earlier calls as `<tool_call>` blocks after its content; each run of `tool` messages as one user turn of
`<tool_response>` blocks. The chat template then renders plain system, user and assistant messages, whatever it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from minisgl.server.function_call.tool_parser import CALL_END, CALL_START

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for a function's name


class ToolError(ValueError):
    """A request's tools or messages that cannot be served: the message, and the field to name in the 400."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Function:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def spec(self) -> dict:
        """The definition as the prompt shows it (OpenAI's shape)."""
        about = {"description": self.description} if self.description else {}
        return {"type": "function", "function": {"name": self.name, **about, "parameters": self.parameters}}


def functions_of(tools: list[Any]) -> list[Function]:
    """The functions of a request's `tools`, or a ToolError naming the one at fault."""
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise ToolError(f'{where} must be {{"type": "function", "function": {{...}}}}', "tools")
        f = tool["function"]
        unknown = set(tool) - {"type", "function"} | set(f) - {"name", "description", "parameters", "strict"}
        if unknown:
            raise ToolError(f"{where}: unsupported field {sorted(unknown)[0]!r}", "tools")
        name = f.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ToolError(f"{where}.function.name must be 1-64 letters, digits, _ or -, got {name!r}", "tools")
        if name in (g.name for g in out):
            raise ToolError(f"{where}: the function {name!r} is defined twice", "tools")
        params = f.get("parameters", Function(name).parameters)
        if not isinstance(params, dict) or not isinstance(f.get("description", ""), str):
            raise ToolError(f"{where}.function: parameters must be a JSON schema object, description a string",
                            "tools")
        out.append(Function(name, f.get("description", ""), params))
    return out


def choice_of(tool_choice: Any, functions: list[Function]) -> str:
    """"none", "auto", "required", or the name of the function the request forces; a ToolError for anything else."""
    if tool_choice is None:
        return "auto" if functions else "none"  # OpenAI's defaults
    if tool_choice in ("none", "auto", "required"):
        if tool_choice != "none" and not functions:
            raise ToolError(f"tool_choice {tool_choice!r} needs tools", "tool_choice")
        return tool_choice
    name = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    if not isinstance(name, str) or tool_choice.get("type") != "function":
        raise ToolError('tool_choice must be "none", "auto", "required" or {"type": "function", "function": '
                        '{"name": ...}}', "tool_choice")
    if name not in (f.name for f in functions):
        raise ToolError(f"tool_choice names the function {name!r}, which is not in tools", "tool_choice")
    return name


def tool_system_prompt(functions: list[Function]) -> str:
    """The lines that tell the model its tools and the call format (the course's wording, Hermes' tags)."""
    lines = "\n".join(json.dumps(f.spec(), ensure_ascii=False) for f in functions)
    return (f"# Tools\n\nFunctions you may call, one JSON definition per line:\n<tools>\n{lines}\n</tools>\n\n"
            f"Call one by writing its name and arguments as JSON between tags:\n{CALL_START}\n"
            f'{{"name": <name>, "arguments": <JSON object>}}\n{CALL_END}')


def call_block(name: str, arguments: str) -> str:
    """An earlier call as the model writes it (arguments: OpenAI's JSON string)."""
    try:
        args = json.dumps(json.loads(arguments), ensure_ascii=False)
    except (json.JSONDecodeError, TypeError):
        raise ToolError(f"the arguments of a call to {name!r} are not JSON: {arguments!r}", "messages") from None
    return f'{CALL_START}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}\n{CALL_END}'


def messages_with_tools(messages: list[dict], functions: list[Function]) -> list[dict]:
    """The chat as plain system/user/assistant messages: the tools in the system message (when given), the
    assistant's calls (`tool_calls`: OpenAI's [{"id", "type", "function": {"name", "arguments"}}]) as blocks, and
    each run of tool results (`{"role": "tool", "content", "tool_call_id"}`) as one user turn."""
    out: list[dict] = []
    for m in messages:
        if m["role"] == "tool":
            block = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("tool_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "tool_results": True})
            continue
        m = dict(m)
        calls = m.pop("tool_calls", None) or []
        blocks = [call_block(c["function"]["name"], c["function"]["arguments"]) for c in calls]
        if blocks:
            m["content"] = "\n".join(([m["content"]] if m["content"] else []) + blocks)
        out.append(m)
    for m in out:
        m.pop("tool_results", None)
    if functions:
        prompt = tool_system_prompt(functions)
        if out and out[0]["role"] == "system":
            out[0] = out[0] | {"content": f"{out[0]['content']}\n\n{prompt}" if out[0]["content"] else prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out
