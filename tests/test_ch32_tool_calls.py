"""Chapter 32: tool calls and reasoning output. The parsers alone (whole text, and streamed with the text cut at every
point), the grammars tool_choice builds (walked with xgrammar's matcher), the request checks, and the real server
with the official openai client: forced calls that parse and validate against their schemas over seeds and
temperatures, streamed deltas that reassemble to the non-streamed answer, a tool round trip, one call with
parallel_tool_calls false, thinking split into reasoning_content, and every refusal a 400 naming its field.

The server runs SmolLM2: tiny-qwen3's 1k-token vocabulary spells a tool prompt of two small tools in ~500 tokens,
its whole 512-token context."""

from __future__ import annotations

import json

import pytest

from helpers import model_path, tokenizer
from minisgl.server.errors import APIError
from minisgl.server.function_call.grammar import MAX_PARALLEL_CALLS, tool_call_grammar
from minisgl.server.function_call.reasoning import ReasoningStream, split_reasoning, thinks_by_default
from minisgl.server.function_call.tool_parser import (CALL_START, ToolCall, ToolCallStream, parse_tool_calls,
                                                      partial_tag_len)
from minisgl.server.function_call.tools import functions_of, messages_with_tools
from minisgl.server.protocol import ChatCompletionRequest, chat_plan, to_tokenize_msg

NAME = "smollm2"
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"]}
BOOKING = {"type": "object", "properties": {"room": {"type": "object", "properties": {
    "beds": {"type": "integer", "minimum": 1, "maximum": 3}, "view": {"type": "boolean"}}, "required": ["beds", "view"]},
    "ages": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 1, "maxItems": 3}},
    "required": ["room", "ages"]}
NOTE = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 12},
                                         "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 2}},
        "required": ["text", "tags"]}
SCHEMAS = {"weather": WEATHER, "book": BOOKING, "note": NOTE}


def tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": SCHEMAS[name]}}


def block(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


# --- the parsers ------------------------------------------------------------------------------------------------

@pytest.mark.stubs("partial_tag_len")
@pytest.mark.parametrize("text, want", [("ok <tool_", 6), ("ok <", 1), ("ok", 0), ("<tool_call", 10),
                                        ("x <tool_call>", 0), ("a<<", 1), ("", 0), ("<tool_call><t", 2)])
def test_partial_tag_len_holds_back_exactly_a_possible_tag_start(text, want):
    got = partial_tag_len(text, CALL_START)
    assert got == want, f"partial_tag_len({text!r}, {CALL_START!r}): expected {want}, got {got}"


WHOLE = [  # text -> (content, [(name, arguments)])
    (block("weather", '{"city": "Paris", "days": 3}'), ("", [("weather", '{"city": "Paris", "days": 3}')])),
    ("Sure. " + block("note", '{"text": "} x", "tags": []}'),
     ("Sure. ", [("note", '{"text": "} x", "tags": []}')])),
    (block("weather", '{"city": "Rome", "days": 1}') + "\n" + block("book", '{"room": {"beds": 2}, "ages": [1]}'),
     ("", [("weather", '{"city": "Rome", "days": 1}'), ("book", '{"room": {"beds": 2}, "ages": [1]}')])),
    ("no call here, a < b", ("no call here, a < b", [])),
    ('x <tool_call>{"bad": 1}</tool_call> y', ('x <tool_call>{"bad": 1}</tool_call> y', [])),
    ('<tool_call>\n{"name": "weather", "arguments": {"city": "Os', ("", [("weather", '{"city": "Os')])),
    ('a\n<tool_call>{"name":"note","arguments": {"text":"hi"} }</tool_call> b ', ("a\n b ", [("note", '{"text":"hi"}')])),
]


@pytest.mark.stubs("parse_tool_calls")
@pytest.mark.parametrize("text, want", WHOLE, ids=range(len(WHOLE)))
def test_the_whole_text_parser_finds_content_and_calls(text, want):
    content, calls = parse_tool_calls(text)
    got = (content, [(c.name, c.arguments) for c in calls])
    assert got == want, f"{text!r}:\n expected {want}\n got      {got}"
    for c in calls:
        assert isinstance(c.arguments, str), f"arguments are the JSON text, a string: got {type(c.arguments).__name__}"


def stream_tool_text(text: str, cuts: list[int]) -> tuple[list[str], list[ToolCall]]:
    """The content pieces and the calls a ToolCallStream hands out for `text` fed in pieces cut at `cuts`."""
    stream, pieces, calls, last = ToolCallStream(), [], [], 0
    deltas = []
    for cut in [*cuts, len(text)]:
        deltas.append(stream.feed(text[last:cut]))
        last = cut
    deltas.append(stream.finish())
    for d in deltas:
        pieces.append(d.content)
        for index, name, arguments in d.calls or []:
            if name is not None:
                assert index == len(calls), f"a new call's index is the next one: {index} after {len(calls)} calls"
                calls.append(ToolCall(name, arguments))
            else:
                calls[index].arguments += arguments
    return pieces, calls


@pytest.mark.stubs("partial_tag_len", "parse_tool_calls")
@pytest.mark.parametrize("text", [t for t, _ in WHOLE], ids=range(len(WHOLE)))
def test_a_streamed_answer_cut_anywhere_reassembles_to_the_whole_parse(text):
    want_content, want_calls = parse_tool_calls(text)
    tags_only = "<" not in want_content  # every "<" of the text is a call's tag: none may go out as content
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1, 2):
            pieces, calls = stream_tool_text(text, [i, j])
            assert ("".join(pieces), calls) == (want_content, want_calls), \
                f"{text!r} cut at {i}, {j}: streamed {''.join(pieces)!r} {calls}, whole {want_content!r} {want_calls}"
            if tags_only:
                leaked = [p for p in pieces if "<" in p]
                assert not leaked, f"{text!r} cut at {i}, {j}: a piece of a tag went out as content: {leaked}"


REASONING = [  # (text, thinking) -> (reasoning, content)
    (("<think>plan it</think>\n\nThe answer.", True), ("plan it", "The answer.")),
    (("<think>plan it</think>\n\nThe answer.", False), ("plan it", "The answer.")),
    (("  <think>\nx</think>", False), ("\nx", "")),
    (("plan it</think> The answer.", True), ("plan it", "The answer.")),
    (("plan it</think> The answer.", False), (None, "plan it</think> The answer.")),
    (("cut while thinking", True), ("cut while thinking", "")),
    (("Just an answer.", False), (None, "Just an answer.")),
    (("<thin", False), (None, "<thin")),
]


@pytest.mark.stubs("split_reasoning")
@pytest.mark.parametrize("case, want", REASONING, ids=range(len(REASONING)))
def test_the_reasoning_split_of_a_whole_answer(case, want):
    got = split_reasoning(*case)
    assert got == want, f"split_reasoning{case}: expected {want}, got {got}"


@pytest.mark.stubs("split_reasoning", "partial_tag_len")
@pytest.mark.parametrize("case", [c for c, _ in REASONING], ids=range(len(REASONING)))
@pytest.mark.parametrize("stream_reasoning", [True, False])
def test_streamed_reasoning_cut_anywhere_equals_the_whole_split(case, stream_reasoning):
    """The closing tag split across tokens at every point: no piece of it, and no reasoning, reaches the content."""
    text, thinking = case
    reasoning, content = split_reasoning(text, thinking)
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            stream, parts = ReasoningStream(thinking, stream_reasoning), []
            for piece in (text[:i], text[i:j], text[j:]):
                parts.append(stream.feed(piece))
            parts.append(stream.finish())
            got = ("".join(r for r, _ in parts), "".join(c for _, c in parts))
            assert got == (reasoning or "", content), \
                f"{text!r} cut at {i}, {j}: streamed {got}, whole ({reasoning!r}, {content!r})"
            if not stream_reasoning and reasoning:
                assert sum(1 for r, _ in parts if r) == 1, f"stream_reasoning false: one piece, got {parts}"


def test_enable_thinking_false_turns_qwen3s_thinking_off_but_not_deepseek_r1s():
    assert thinks_by_default("qwen3", None) and thinks_by_default("qwen3", True)
    assert not thinks_by_default("qwen3", False), "enable_thinking false: an answer starts outside its thinking"
    assert thinks_by_default("deepseek-r1", False), "DeepSeek-R1's template always opens the thinking"


# --- the grammars -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def grammars():
    from minisgl.constrained.grammar import GrammarCache

    tok = tokenizer(NAME)
    return GrammarCache(tok, len(tok))


def accepts(grammars, ebnf: str, text: str) -> bool:
    """Whether the grammar takes all of `text` and may end there."""
    import xgrammar as xgr

    from minisgl.constrained.grammar import GrammarSpec

    matcher = xgr.GrammarMatcher(grammars.compile(GrammarSpec("ebnf", ebnf)))
    return matcher.accept_string(text) and matcher.is_completed()


@pytest.mark.stubs("tool_call_grammar")
def test_tool_choice_builds_the_grammar_of_its_calls(grammars):
    functions = functions_of([tool("weather"), tool("book")])
    assert tool_call_grammar(functions, "auto", True) is None and tool_call_grammar(functions, "none", True) is None
    paris = block("weather", '{"city": "Paris", "days": 3}')
    booking = block("book", '{"room": {"beds": 2, "view": true}, "ages": [30, 4]}')
    required = tool_call_grammar(functions, "required", True)
    for text, ok, why in [
            (paris, True, "one call of a tool"), (booking, True, "a call of the other tool"),
            (paris + "\n" + booking, True, "two calls with parallel_tool_calls"),
            ("\n".join([paris] * MAX_PARALLEL_CALLS), True, f"{MAX_PARALLEL_CALLS} calls"),
            ("\n".join([paris] * (MAX_PARALLEL_CALLS + 1)), False, f"more than {MAX_PARALLEL_CALLS} calls"),
            ("The weather is nice.", False, "plain text under required"), ("", False, "no call under required"),
            (block("weather", '{"city": "Lima", "days": 3}'), False, "a value outside the enum"),
            (block("weather", '{"city": "Paris", "days": 9}'), False, "an integer above its maximum"),
            (block("weather", '{"city": "Paris"}'), False, "a required argument missing"),
            (block("weather", '{"city": "Paris", "days": 3}') + " ok", False, "text after the calls"),
            (block("book", '{"room": {"beds": 2, "view": true}, "ages": [1, 2, 3, 4]}'), False, "maxItems")]:
        assert accepts(grammars, required, text) == ok, f"required, {why}: {'refused' if ok else 'accepted'} {text!r}"
    single = tool_call_grammar(functions, "required", False)
    assert accepts(grammars, single, paris), "parallel_tool_calls false: one call"
    assert not accepts(grammars, single, paris + "\n" + booking), "parallel_tool_calls false: a second call accepted"
    named = tool_call_grammar(functions, "book", True)
    assert accepts(grammars, named, booking), "the named function's call"
    assert not accepts(grammars, named, paris), "a named tool_choice accepted a call of another function"
    assert not accepts(grammars, named, booking + "\n" + booking), "a named tool_choice is one call"


# --- the requests -----------------------------------------------------------------------------------------------

CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]


def refusal(parsers=("qwen25", "qwen3"), **fields) -> tuple[int, str, str]:
    req = ChatCompletionRequest(**({"messages": CHAT, "max_tokens": 8} | fields))
    with pytest.raises(APIError) as refused:
        to_tokenize_msg(0, req, chat_plan(req, *parsers))
    return refused.value.status, refused.value.param, refused.value.message


@pytest.mark.stubs("tool_call_grammar")
def test_requests_the_server_cannot_serve_are_a_400_naming_the_field():
    status, param, message = refusal((None, None), tools=[tool("weather")])
    assert (status, param) == (400, "tools") and "--tool-call-parser" in message, \
        f"tools on a server without the flag: {status} {param} {message}"
    history = CHAT + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]}]
    assert refusal((None, None), messages=history)[:2] == (400, "messages[1]"), "tool calls in history, no parser"
    for fields, param, why in [
            ({"tools": [tool("weather")], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
             "tool_choice", "an unknown function"),
            ({"tools": [tool("weather")], "tool_choice": "required", "response_format": {"type": "json_object"}},
             "tool_choice", "tool_choice with response_format"),
            ({"tools": [tool("weather")], "tool_choice": "sometimes"}, "tool_choice", "an unknown tool_choice"),
            ({"tool_choice": "required"}, "tool_choice", "required without tools"),
            ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]},
             "tools", "an invalid schema"),
            ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools", "a bad function name"),
            ({"tools": [tool("weather"), tool("weather")]}, "tools", "a function defined twice"),
            ({"functions": [{"name": "f"}]}, "functions", "the deprecated functions"),
            ({"function_call": "auto"}, "function_call", "the deprecated function_call"),
            ({"chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs", "enable_thinking not a bool"),
            ({"chat_template_kwargs": {"tools_mode": 1}}, "chat_template_kwargs", "an unknown template argument")]:
        status, got, message = refusal(**fields)
        assert (status, got) == (400, param), f"{why}: expected a 400 naming {param}, got {status} naming {got}: {message}"
    req = ChatCompletionRequest(messages=CHAT, chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(APIError) as refused:
        to_tokenize_msg(0, req, chat_plan(req, "qwen25", None))
    assert refused.value.param == "chat_template_kwargs", "enable_thinking needs --reasoning-parser"


@pytest.mark.stubs("tool_call_grammar")
def test_the_plan_of_each_tool_choice():
    def plan(**fields):
        return chat_plan(ChatCompletionRequest(**({"messages": CHAT} | fields)), "qwen25", "qwen3")

    auto = plan(tools=[tool("weather")])
    assert (auto.tool_choice, auto.grammar) == ("auto", None), "tools alone: auto, unconstrained"
    none = plan(tools=[tool("weather")], tool_choice="none")
    assert (none.tool_choice, none.grammar) == ("none", None), "none: no grammar"
    msg = to_tokenize_msg(0, ChatCompletionRequest(messages=CHAT, tools=[tool("weather")], tool_choice="none"),
                          none)
    assert "<tools>" not in msg.text[0]["content"], "tool_choice none: no tools in the prompt"
    forced = plan(tools=[tool("weather")], tool_choice="required", parallel_tool_calls=False)
    assert forced.grammar is not None and forced.max_calls == 1, "required, one call"
    msg = to_tokenize_msg(0, ChatCompletionRequest(messages=CHAT, tools=[tool("weather")], tool_choice="required"),
                          plan(tools=[tool("weather")], tool_choice="required"))
    assert msg.sampling_params.ebnf is not None, "required puts its grammar on the request (chapter 25's ebnf)"
    off = plan(chat_template_kwargs={"enable_thinking": False})
    assert off.thinking is False, "enable_thinking false reaches the reasoning parser"
    assert plan().thinking is True and plan(separate_reasoning=False).thinking is None


ROUND_TRIP = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris for 2 days?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris","days":2}'}},
        {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Rome","days":2}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
]


def test_a_round_trip_renders_tools_calls_and_results_as_the_template_expects():
    got = messages_with_tools(ROUND_TRIP, functions_of([tool("weather")]))
    spec = json.dumps(tool("weather"))
    assert got[0]["role"] == "system" and got[0]["content"].startswith("Be brief.\n\n# Tools\n\n"), got[0]
    assert f"<tools>\n{spec}\n</tools>" in got[0]["content"], f"the tool's definition: {got[0]['content']!r}"
    assert got[1:] == [
        {"role": "user", "content": "Weather in Paris for 2 days?"},
        {"role": "assistant", "content": block("weather", '{"city": "Paris", "days": 2}') + "\n"
                                         + block("weather", '{"city": "Rome", "days": 2}')},
        {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrain\n</tool_response>"},
    ], f"the calls as blocks, the two results as one user turn: {got[1:]}"


# --- the server -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client():
    from openai import OpenAI

    from minisgl.server.local import LocalServer

    flags = ("--max-running-reqs", "8", "--max-seq-len", "1024", "--cpu-kv-cache-mb", "48",
             "--tool-call-parser", "qwen25", "--reasoning-parser", "qwen3")
    with LocalServer(model_path(NAME), *flags, echo=False) as server:
        yield OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def ask(client, **fields):
    body = {"model": NAME, "messages": CHAT, "max_tokens": 160,
            "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}} | fields
    return client.chat.completions.create(**body)


@pytest.mark.stubs("tool_call_grammar", "parse_tool_calls")
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_a_forced_call_parses_and_validates_over_seeds_and_temperatures(client, name):
    """Named and required tool_choice, sampled at two temperatures (choices of their own seeds): every answer is
    calls only, each of a function offered, its arguments a JSON string that validates against its schema (greedy
    answers are checked by the streaming test)."""
    import jsonschema

    tools = [tool(name), tool("weather" if name != "weather" else "note")]
    for choice, temperature, seed in [({"type": "function", "function": {"name": name}}, 1.0, 1),
                                      ("required", 1.3, 2)]:
        r = ask(client, tools=tools, tool_choice=choice, temperature=temperature, seed=seed, n=2,
                parallel_tool_calls=False, max_tokens=200)
        for c in r.choices:
            where = f"{name}, tool_choice {choice}, temperature {temperature}, seed {seed}, choice {c.index}"
            calls = c.message.tool_calls
            assert c.finish_reason == "tool_calls" and calls, f"{where}: {c.finish_reason}, {c.message}"
            assert c.message.content is None, f"{where}: a forced call has no content: {c.message.content!r}"
            if choice != "required":
                assert [t.function.name for t in calls] == [name], f"{where}: {calls}"
            for t in calls:
                assert t.id.startswith("call_") and t.type == "function", f"{where}: {t}"
                assert isinstance(t.function.arguments, str), f"{where}: arguments must be a JSON string"
                jsonschema.validate(json.loads(t.function.arguments), SCHEMAS[t.function.name])
            text = "\n".join(block(t.function.name, t.function.arguments) for t in calls)
            assert [(x.name, x.arguments) for x in parse_tool_calls(text)[1]] == \
                [(t.function.name, t.function.arguments) for t in calls], f"{where}: the blocks parse back"


def reassemble(chunks) -> tuple[str, str, list[dict], str | None, list[str]]:
    """(content, reasoning, calls, finish reason, content pieces) of a streamed choice 0."""
    content, reasoning, calls, finish, pieces = "", "", [], None, []
    for chunk in chunks:
        for c in chunk.choices:
            d = c.delta
            if d.content:
                content += d.content
                pieces.append(d.content)
            reasoning += getattr(d, "reasoning_content", None) or ""
            for t in d.tool_calls or []:
                if t.id is not None:
                    assert t.index == len(calls) and t.function.name, f"a new call's first delta: {t}"
                    calls.append({"id": t.id, "name": t.function.name, "arguments": t.function.arguments or ""})
                else:
                    assert t.function.name is None, f"the name comes once, in the first delta: {t}"
                    calls[t.index]["arguments"] += t.function.arguments
            finish = c.finish_reason or finish
    return content, reasoning, calls, finish, pieces


@pytest.mark.stubs("partial_tag_len", "parse_tool_calls", "tool_call_grammar")
@pytest.mark.parametrize("choice, parallel", [("required", True), ({"type": "function", "function": {"name": "book"}},
                                                                    False)], ids=["required", "named"])
def test_streamed_call_deltas_reassemble_to_the_non_streamed_answer(client, choice, parallel):
    tools = [tool("weather"), tool("book"), tool("note")]
    fields = dict(tools=tools, tool_choice=choice, temperature=0, parallel_tool_calls=parallel, max_tokens=400)
    whole = ask(client, **fields).choices[0]
    content, _, calls, finish, pieces = reassemble(ask(client, stream=True, **fields))
    want = [(t.function.name, t.function.arguments) for t in whole.message.tool_calls]
    assert [(c["name"], c["arguments"]) for c in calls] == want, \
        f"tool_choice {choice}: streamed {calls}, whole {want}"
    assert all(c["id"].startswith("call_") for c in calls), f"each call's first delta has its id: {calls}"
    assert not pieces and finish == whole.finish_reason == "tool_calls", \
        f"tool_choice {choice}: content pieces {pieces} (a tag leaked?), finish {finish} / {whole.finish_reason}"
    if not parallel:
        assert len(calls) == 1, f"parallel_tool_calls false: one call, got {len(calls)}"


def test_parallel_tool_calls_false_gives_one_call_and_true_at_most_the_cap(client):
    tools = [tool("weather"), tool("note")]
    for parallel in (False, True):
        r = ask(client, tools=tools, tool_choice="required", temperature=1.0, seed=7, n=2,
                parallel_tool_calls=parallel, max_tokens=400)
        for c in r.choices:
            count = len(c.message.tool_calls or [])
            if parallel:
                assert 1 <= count <= MAX_PARALLEL_CALLS, f"choice {c.index}: {count} calls"
            else:
                assert count == 1, f"parallel_tool_calls false, choice {c.index}: {count} calls"


def test_a_tool_round_trip_answers_on_the_rendered_prompt(client):
    """The assistant's calls and the tool results go back in: the prompt the server ran is the template's rendering
    of messages_with_tools (its token count), and the answer is text (tool_choice auto: SmolLM2 answers in words)."""
    r = ask(client, messages=ROUND_TRIP, tools=[tool("weather")], temperature=0, max_tokens=24)
    tok = tokenizer(NAME)
    text = tok.apply_chat_template(messages_with_tools(ROUND_TRIP, functions_of([tool("weather")])),
                                   add_generation_prompt=True, tokenize=False)
    assert r.usage.prompt_tokens == len(tok.encode(text, add_special_tokens=False)), \
        f"prompt tokens {r.usage.prompt_tokens}: not the rendered round trip ({text!r})"
    assert r.choices[0].message.content, f"an answer after the tool results: {r.choices[0].message}"


THINK = 'root ::= "<think>" [a-z ]{1,24} "</think>" [a-z .]{1,16}'


@pytest.mark.stubs("split_reasoning", "partial_tag_len")
def test_thinking_goes_to_reasoning_content_streamed_or_not(client):
    """SmolLM2 never thinks: a chapter-25 grammar makes it write <think>...</think> then an answer. The raw text
    (separate_reasoning false) split by the parser is what the server answers, streamed or not."""
    for seed in (3,):
        fields = dict(temperature=1.0, seed=seed, max_tokens=60, extra_body={"ebnf": THINK})
        raw = ask(client, **fields | {"extra_body": {"ebnf": THINK, "separate_reasoning": False}})
        raw_text = raw.choices[0].message.content
        assert raw_text.startswith("<think>") and "</think>" in raw_text, f"separate_reasoning false: {raw_text!r}"
        want = split_reasoning(raw_text, True)
        m = ask(client, **fields).choices[0].message
        assert (m.reasoning_content, m.content) == want, f"seed {seed}: {raw_text!r} -> {want}, got {m}"
        content, reasoning, _, _, _ = reassemble(ask(client, stream=True, **fields))
        assert (reasoning, content) == want, f"seed {seed}, streamed: {(reasoning, content)} vs {want}"
    plain = dict(temperature=0, max_tokens=12)
    off = ask(client, **plain).choices[0].message
    on = ask(client, **plain | {"extra_body": {}}).choices[0].message
    assert off.content and off.reasoning_content is None, f"enable_thinking false: an answer, no reasoning: {off}"
    assert (on.reasoning_content, on.content) == (off.content, ""), \
        f"thinking on (Qwen3's default), no </think>: a cut thinking, all reasoning: {on}"


def test_auto_lets_the_model_answer_in_words(client):
    r = ask(client, tools=[tool("weather")], temperature=0, max_tokens=24).choices[0]
    assert r.finish_reason in ("stop", "length") and r.message.tool_calls is None and r.message.content, \
        f"SmolLM2 under tool_choice auto: {r}"


def test_bad_tool_requests_are_a_400_naming_the_field_and_the_server_goes_on(client):
    import openai

    for fields, param in [
            (dict(tools=[tool("weather")], tool_choice={"type": "function", "function": {"name": "nope"}}),
             "tool_choice"),
            (dict(tools=[tool("weather")], tool_choice="required", response_format={"type": "json_object"}),
             "tool_choice"),
            (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]),
             "tools"),
            (dict(functions=[{"name": "f"}]), "functions"),
            (dict(messages=CHAT + [{"role": "tool", "content": "x"}]), "messages[1]")]:
        with pytest.raises(openai.BadRequestError) as refused:
            ask(client, **fields)
        assert refused.value.body["param"] == param, f"{fields}: {refused.value.body}"
        assert ask(client, temperature=0, max_tokens=2).choices[0].message.content, "the server answers after it"


def test_without_tools_a_call_shaped_answer_stays_content(client):
    """tool_choice none: the answer is not parsed for calls, even when its text looks like one."""
    shaped = 'root ::= "<tool_call>\\n{\\"name\\": \\"weather\\", \\"arguments\\": {}}\\n</tool_call>"'
    for fields in ({"tools": [tool("weather")], "tool_choice": "none"},):
        r = ask(client, temperature=0, max_tokens=80, **fields,
                extra_body={"ebnf": shaped, "chat_template_kwargs": {"enable_thinking": False}}).choices[0]
        assert r.message.tool_calls is None and r.message.content == block("weather", "{}"), \
            f"{fields or 'no tools'}: the text is content, not a call: {r}"
        assert r.finish_reason == "stop", f"{fields or 'no tools'}: {r.finish_reason}"
