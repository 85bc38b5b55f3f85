"""Chapter 11 example: overlap scheduling. The order of launches and result processing with overlap off and
on, identical outputs, and the cost of overlap: a request that hits EOS runs one extra (discarded) step."""

import time

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
questions = ["What is the capital of France?", "Name a primary color.", "What is 2 + 2?", "Say hello."]
outputs, timings = {}, {}
for overlap in (False, True):
    llm = LLM(path, max_running_reqs=4, max_seq_len=512, overlap=overlap)
    prompts = [llm.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                 tokenize=True, return_dict=False) for q in questions]
    llm.generate(prompts[:1], SamplingParams(max_tokens=2))  # warm-up: first-call costs stay out of the timing
    llm.scheduler.history.clear()
    log = []  # request K below is the K-th prompt: uids count on from the warm-up request
    llm.scheduler.on_batch = lambda b: log.append(f"launch {b.phase[0]}{len(llm.scheduler.history)}")
    llm.scheduler.on_token = lambda r, t: log.append(f"got r{r.uid - 1}")
    t0 = time.perf_counter()
    outs = llm.generate(prompts, SamplingParams(max_tokens=24))
    timings[overlap] = time.perf_counter() - t0
    outputs[overlap] = [o["token_ids"] for o in outs]
    print(f"== overlap {'on ' if overlap else 'off'}: the first events "
          "(launch pN/dN = prefill/decode batch N; got rK = request K's token processed)")
    print("  " + ", ".join(log[:14]) + ", ...")
    steps = {k: sum(k + 1 in uids for phase, uids in llm.scheduler.history) for k in range(len(prompts))}
    print(f"  batches each request ran in: {steps}; tokens: {[len(t) for t in outputs[overlap]]}")
    llm.scheduler.check_integrity()
for q, out in zip(questions, outs):
    print(f"  {q:<32} -> {llm.tokenizer.decode(out['token_ids'], skip_special_tokens=True).strip()[:50]!r}")
print(f"\nwall time: overlap off {timings[False]:.2f} s, on {timings[True]:.2f} s "
      "(on a CPU every operation is synchronous: nothing to hide behind)")
print(f"identical outputs with overlap on and off: {outputs[True] == outputs[False]}")
raise SystemExit(0 if outputs[True] == outputs[False] else 1)
