"""Chapter 23 example: chat questions whose answers end at EOS long before max_tokens, on a KV pool that holds three
requests at their full max_tokens. Conservative admission runs three at a time; optimistic admission runs more,
retracts when the pool runs dry, and recomputes. Both runs are checked against HF greedy (stopping at EOS)."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler.retract import NewTokenRatio
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
MAX_TOKENS = 48
QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "What is 2 + 2?",
             "Write one sentence about the ocean.", "Give me a synonym for happy.", "What does a CPU do?",
             "List three fruits.", "What is the boiling point of water?"]
tokenizer = AutoTokenizer.from_pretrained(path)
prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                         return_dict=False) for q in QUESTIONS]
POOL = 3 * (max(len(p) for p in prompts) + MAX_TOKENS)  # slots: three requests at their longest
print(f"{len(prompts)} chat questions, prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, "
      f"max_tokens {MAX_TOKENS}, a KV pool of {POOL} slots (3 requests at their longest)\n")


def run(admission: str) -> dict[int, list[int]]:
    ratio = NewTokenRatio(init=0.3, min_ratio=0.1, decay_steps=50)  # bolder than SGLang's start, for a short run
    llm = LLM(path, max_running_reqs=len(prompts), max_seq_len=256, num_pages=POOL, admission=admission,
              new_token_ratio=ratio)
    sched = llm.scheduler
    events, retracted, widest = [], set(), [0]

    def on_retract(req) -> None:
        known = len(req.input_ids)
        cached = sched.cache_manager.prefix_cache.match_prefix(req.input_ids.tolist())[0].cached_len
        events.append(f"  batch {len(sched.history):>3}: retract request {req.uid} ({req.device_len - req.prompt_len} "
                      f"tokens generated): {known} tokens known, {cached} of them kept in the radix cache")
        retracted.add(req.uid)
        sched.check_integrity()  # every table row and KV page free, cached or held, exactly once

    def on_batch(batch) -> None:
        widest[0] = max(widest[0], len(batch.decode_reqs))
        for r in batch.prefill_reqs:
            if r.uid in retracted:
                retracted.discard(r.uid)
                events.append(f"  batch {len(sched.history):>3}: request {r.uid} admitted again: {r.cached_len} of "
                              f"{r.device_len} tokens found in the cache, {r.extend_len} recomputed")

    sched.on_retract, sched.on_batch = on_retract, on_batch
    outputs = [o["token_ids"] for o in llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))]
    sched.check_integrity()
    tokens, retractions = sum(map(len, outputs)), sched.admission.num_retractions
    print(f"admission={admission}: {len(sched.history)} batches, at most {widest[0]} requests decoding at once, "
          f"{retractions} retraction{'' if retractions == 1 else 's'}, {tokens} tokens")
    print("\n".join(events[:8]) + ("\n  ..." if len(events) > 8 else ""))
    return outputs


hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
want = []
for prompt in prompts:
    with torch.inference_mode():
        out = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          do_sample=False, max_new_tokens=MAX_TOKENS)
    want.append(out[0, len(prompt):].tolist())

results = {admission: run(admission) for admission in ("conservative", "optimistic")}
print(f"\nanswer lengths: {[len(w) for w in want]} tokens (EOS included)")
for admission, outputs in results.items():
    print(f"{admission:<12} equal to HF greedy: {outputs == want}")
print(f"first answer: {tokenizer.decode(results['optimistic'][0], skip_special_tokens=True)!r}")
