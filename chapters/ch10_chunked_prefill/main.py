"""Chapter 10 example: chunked prefill with a budget of 16 tokens per batch, traced batch by batch, then the
step simulator's view of why chunks bound decode stalls."""

import torch
from transformers import AutoModelForCausalLM

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler.prefill import ChunkedReq
from minisgl.teaching.step_sim import Sequence, StepSimulator
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
BUDGET = 16
llm = LLM(path, max_running_reqs=4, max_seq_len=256, max_extend_tokens=BUDGET)
texts = ["Paged attention stores the keys and values of every request in fixed-size blocks, so memory is "
         "allocated on demand and shared prefixes can be reused across requests without copying. A scheduler "
         "then decides, step after step, which requests run together, and the result is that a server",
         "The cat sat on the mat and looked out of the window at", "Water boils at"]
prompts = [llm.tokenizer.encode(t) for t in texts]
print(f"prompts of {[len(p) for p in prompts]} tokens, max_extend_tokens = {BUDGET}\n")

trace = []


def record(batch):
    if batch.is_prefill:
        parts = [f"{r.uid}[{r.cached_len}:{r.device_len}] {'chunked' if isinstance(r, ChunkedReq) else 'complete'}"
                 for r in batch.reqs]
        trace.append(f"prefill {sum(r.extend_len for r in batch.reqs):>3} tokens: " + ", ".join(parts))
    else:
        trace.append(f"decode  {batch.size:>3} tokens: requests {[r.uid for r in batch.reqs]}")


llm.scheduler.on_batch = record
params = SamplingParams(max_tokens=6, ignore_eos=True)
outputs = llm.generate(prompts, params)
for i, line in enumerate(trace):
    if i == 0 or line != trace[i - 1]:
        repeats = next((j for j in range(i, len(trace)) if trace[j] != line), len(trace)) - i
        print(f"batch {i:>2}  {line}" + (f"   (x{repeats})" if repeats > 1 else ""))

hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
match = True
for text, prompt, out in zip(texts, prompts, outputs):
    with torch.inference_mode():
        ref = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          do_sample=False, max_new_tokens=6, min_new_tokens=6)[0, len(prompt):].tolist()
    match &= ref == out["token_ids"]
    print(f"  ...{text[-24:]!r} -> {out['text']!r}")
llm.scheduler.check_integrity()
print(f"matches HF greedy: {match}\n")

print("step simulator (no model): 3 sequences decoding when a 64-token prompt arrives; tokens per step")
for chunk_size in (64, 16, 8):
    sched = StepSimulator(chunk_size)
    for i in range(3):
        sched.add(Sequence(i, prompt_len=4, max_tokens=12))
    for _ in range(3):
        sched.schedule()  # the three short prompts are prefilled and start decoding
    sched.add(Sequence(3, prompt_len=64, max_tokens=2))
    steps = [sched.schedule() for _ in range(4)]
    print(f"  chunk_size {chunk_size:>2}: " + " ".join(f"{s.num_tokens:>3}" for s in steps) +
          f"   -> the longest step a decoding sequence waits for: {max(s.num_tokens for s in steps)} tokens")
raise SystemExit(0 if match else 1)
