"""Chapter 7 example: LLM.generate with continuous batching on SmolLM2; requests join and leave the batch."""

import time

from transformers import AutoModelForCausalLM

import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
llm = LLM(path, max_running_reqs=3, max_seq_len=512)
questions = ["What is the capital of France?", "Name a primary color.", "Write one sentence about bread.",
             "What is 2 + 2?", "Give me a synonym for happy.", "Describe the moon in five words."]
prompts = [llm.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False) for q in questions]
params = SamplingParams(max_tokens=32)  # stops at EOS, like HF generate
t0 = time.perf_counter()
outputs = llm.generate(prompts, params)
elapsed = time.perf_counter() - t0

print("batches (at most 3 requests run at once; finished ones leave, waiting ones join):")
for step, (phase, uids) in enumerate(llm.scheduler.history):
    if phase == "prefill" or step < 3:
        print(f"  step {step:>3}  {phase:<8} requests {uids}")
print(f"  ... {len(llm.scheduler.history)} steps in total\n")

hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
all_match = True
for q, prompt, out in zip(questions, prompts, outputs):
    with torch.inference_mode():
        ref = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          do_sample=False, max_new_tokens=32)[0, len(prompt):].tolist()
    all_match &= ref == out["token_ids"]
    print(f"{q:<36} -> {out['text'].strip()[:60]!r}")
total = sum(len(o["token_ids"]) for o in outputs)
print(f"\n{len(prompts)} requests, {total} tokens in {elapsed:.1f} s = {total / elapsed:.1f} tokens/s")
print(f"matches HF greedy: {all_match}")
llm.scheduler.check_integrity()
raise SystemExit(0 if all_match else 1)
