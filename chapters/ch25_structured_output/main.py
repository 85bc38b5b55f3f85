"""Chapter 25 example: SmolLM2 answers under a grammar, in one batch with a free row: a JSON schema (the answer
parsed and checked), a regular expression for a date, an EBNF grammar, and the same question without one."""

import json
import re

from transformers import AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
tokenizer = AutoTokenizer.from_pretrained(path)


def chat(question: str) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)


person = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "city": {"type": "string"}}, "required": ["name", "age", "city"]}
date = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
REQUESTS = {
    "json_schema": ("Describe a fictional person as JSON.", dict(json_schema=json.dumps(person))),
    "regex (a date)": ("When did the first person walk on the moon?", dict(regex=date)),
    "ebnf": ("Is the sea salty?", dict(ebnf='root ::= ("Yes" | "No") ", because " [a-z ]+ "."')),
    "no grammar": ("Describe a fictional person as JSON.", dict()),
}
llm = LLM(path, max_running_reqs=8, max_seq_len=512)
params = [SamplingParams(max_tokens=60, **kw) for _, kw in REQUESTS.values()]
outputs = llm.generate([chat(q) for q, _ in REQUESTS.values()], params)  # one batch, one mask for three rows
for name, out in zip(REQUESTS, outputs):
    print(f"{name:>15} ({len(out['token_ids']):2} tokens): {out['text']!r}")

value = json.loads(outputs[0]["text"])
print(f"\nthe JSON answer parses, with the schema's keys: {sorted(value) == sorted(person['properties'])} -> {value}")
print(f"the date matches the regex: {re.fullmatch(date, outputs[1]['text']) is not None}")
