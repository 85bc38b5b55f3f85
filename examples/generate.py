"""`make run`: the finished engine answers a few questions with SmolLM2-135M-Instruct and reports throughput.

MODEL=<fixture name or path to a Hugging Face Llama/Qwen3 folder> selects another model.
"""

import time

from transformers import AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.engine.manual import ManualBatcher
from tools.models import model_path_from_env

QUESTIONS = [
    "What is the capital of France?",
    "Give me two tips for staying focused while studying.",
    "Explain in one sentence what a cache is.",
    "Write a haiku about the sea.",
]

path = model_path_from_env("smollm2")
tok = AutoTokenizer.from_pretrained(path)
t0 = time.perf_counter()
engine = Engine(EngineConfig(path, max_running_reqs=len(QUESTIONS), max_seq_len=1024))
print(f"loaded {path.name} ({engine.model_config.architecture}) on {engine.device} in {time.perf_counter() - t0:.1f} s")

prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                   return_dict=False) for q in QUESTIONS]
t0 = time.perf_counter()
outputs = ManualBatcher(engine).generate(prompts, SamplingParams(max_tokens=96))
elapsed = time.perf_counter() - t0

for question, out in zip(QUESTIONS, outputs):
    print(f"\n>>> {question}\n{tok.decode(out, skip_special_tokens=True).strip()}")
total = sum(len(o) for o in outputs)
print(f"\n{len(QUESTIONS)} requests in one batch: {total} tokens in {elapsed:.1f} s = {total / elapsed:.1f} tokens/s")
engine.cache.check_integrity()
