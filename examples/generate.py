"""`make run`: the finished engine answers a few questions with SmolLM2-135M-Instruct and reports throughput.

MODEL=<fixture name or path to a Hugging Face Llama/Qwen3 folder> selects another model. `--tp N` (`make run
TP=N`) runs it with tensor parallelism over N rank processes (chapter 16; the heads must divide by N).
"""

import argparse
import time

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from tools.models import model_path_from_env

QUESTIONS = [
    "What is the capital of France?",
    "Give me two tips for staying focused while studying.",
    "Explain in one sentence what a cache is.",
    "Write a haiku about the sea.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (tp_size)")
    tp = parser.parse_args().tp
    path = model_path_from_env("smollm2")
    t0 = time.perf_counter()
    llm = LLM(path, max_running_reqs=len(QUESTIONS), max_seq_len=1024, tp_size=tp)
    engine = llm.engine  # None with tp > 1: the engines live in the rank processes
    where = f"{engine.model_config.architecture} on {engine.device}" if engine else f"{tp} tensor-parallel ranks"
    print(f"loaded {path.name} ({where}) in {time.perf_counter() - t0:.1f} s")

    prompts = [llm.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                 tokenize=True, return_dict=False) for q in QUESTIONS]
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, SamplingParams(max_tokens=96))
    elapsed = time.perf_counter() - t0

    for question, out in zip(QUESTIONS, outputs):
        print(f"\n>>> {question}\n{out['text'].strip()}")
    total = sum(len(o["token_ids"]) for o in outputs)
    line = f"\n{len(QUESTIONS)} requests: {total} tokens in {elapsed:.1f} s = {total / elapsed:.1f} tokens/s"
    if engine is None:
        print(f"{line} (tp_size {tp})")
        llm.shutdown()
        return
    print(f"{line} ({len(llm.scheduler.history)} batches, page size {engine.config.page_size}, "
          f"{engine.config.cache_type} cache, overlap {'on' if llm.scheduler.config.overlap else 'off'})")
    llm.scheduler.check_integrity()


if __name__ == "__main__":  # tensor-parallel ranks are spawned: they import this file without running main()
    main()
