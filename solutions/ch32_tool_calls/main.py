"""Chapter 32 example: SmolLM2 behind the server with --tool-call-parser qwen25 --reasoning-parser qwen3, through the
official openai client: a forced call (validated against its schema), the same call streamed, a tool round trip,
tool_choice auto, and thinking split into reasoning_content."""

import json

from openai import OpenAI

from minisgl.server.local import LocalServer
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast of a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"]}}}
QUESTION = [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}  # Qwen3's switch: SmolLM2 does not think

flags = ("--max-seq-len", "1024", "--tool-call-parser", "qwen25", "--reasoning-parser", "qwen3")
with LocalServer(path, *flags, echo=False) as server:
    client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id

    def ask(**fields):
        return client.chat.completions.create(**({"model": model, "messages": QUESTION, "temperature": 0,
                                                  "max_tokens": 100, "extra_body": NO_THINKING} | fields))

    print("1. tool_choice names get_weather: the grammar makes SmolLM2 write one call that follows the schema")
    answer = ask(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}}).choices[0]
    call = answer.message.tool_calls[0]
    print(f"   finish_reason={answer.finish_reason!r} content={answer.message.content!r}")
    print(f"   tool_calls[0]: id=call_... name={call.function.name!r} arguments={call.function.arguments!r}")
    args = json.loads(call.function.arguments)
    schema = WEATHER["function"]["parameters"]
    print(f"   the arguments parse, the city is in the enum, 1 <= days <= 7: "
          f"{args['city'] in schema['properties']['city']['enum'] and 1 <= args['days'] <= 7}")

    print("\n2. tool_choice required, streamed: the first delta of a call names it, the next ones carry its arguments")
    pieces = []
    for chunk in ask(tools=[WEATHER], tool_choice="required", stream=True):
        for t in chunk.choices[0].delta.tool_calls or []:
            pieces.append(f"[{t.index}] name={t.function.name!r}" if t.id else repr(t.function.arguments))
    print("   " + " ".join(pieces))

    print("\n3. the round trip: the call and its result go back as messages, and the model answers again")
    result = {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"forecast": "sunny", "high_c": 24})}
    turn = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]}, result]
    final = ask(messages=turn, tools=[WEATHER], max_tokens=40).choices[0]
    print(f"   finish_reason="
          f"{final.finish_reason!r}: {final.message.content!r}")

    print("\n4. tool_choice auto: SmolLM2 (135M, never trained on this format) writes prose")
    auto = ask(tools=[WEATHER], max_tokens=40).choices[0]
    print(f"   finish_reason={auto.finish_reason!r} tool_calls={auto.message.tool_calls} content={auto.message.content!r}")

    print("\n5. thinking: an EBNF grammar makes the model write <think>...</think> first; the parser splits it")
    think = ask(max_tokens=60, extra_body={"ebnf": 'root ::= "<think>" [a-z ]{4,30} "</think>" [A-Za-z .]{4,30}'})
    message = think.choices[0].message
    print(f"   reasoning_content={message.reasoning_content!r}\n   content={message.content!r}")
