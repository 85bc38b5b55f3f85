"""Chapter 6 example: the Engine runs a hand-filled batch on SmolLM2, one request reusing a cached prefix."""

import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.teaching.manual import ManualBatcher
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
tok = AutoTokenizer.from_pretrained(path)
engine = Engine(EngineConfig(path, max_running_reqs=8, max_seq_len=512))
print(f"engine: {engine.model_config.architecture} on {engine.device}, {engine.config.dtype}, KV pool of "
      f"{engine.kv_cache.num_slots} slots ({engine.kv_bytes_per_token} bytes per token)\n")


def chat(text: str) -> list[int]:
    messages = [{"role": "user", "content": text}]
    return list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


questions = ["What is the capital of France?", "Give me a tip for learning to cook.", "Name a planet."]
params = SamplingParams(max_tokens=40)  # stops at EOS, like HF generate
batcher = ManualBatcher(engine)
reqs = [batcher.add(chat(q), params) for q in questions]
t0 = time.perf_counter()
batcher.run(reqs)
elapsed = time.perf_counter() - t0
generated = sum(len(r.output_ids) for r in reqs)

# A follow-up that starts with the first request's prompt: its KV is already in the cache.
follow = chat(questions[0]) + tok.encode("Paris", add_special_tokens=False)
reader = batcher.add(follow, params, prefix_of=reqs[0], prefix_len=len(chat(questions[0])))
print(f"follow-up request: {len(follow)} prompt tokens, {reader.cached_len} already cached, "
      f"{reader.extend_len} computed")
batcher.run([reader])

hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
all_match = True
for req in reqs + [reader]:
    prompt = req.input_ids[: req.prompt_len].tolist()
    with torch.inference_mode():
        ref = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=40,
                          attention_mask=torch.ones(1, len(prompt), dtype=torch.long))[0, len(prompt):].tolist()
    same = ref == req.output_ids
    all_match &= same
    question = tok.decode(prompt[-12:], skip_special_tokens=True).replace("\n", " ").strip()
    print(f"\n[{req.uid}] ...{question!r}\n    -> {tok.decode(req.output_ids, skip_special_tokens=True)!r}"
          f"\n    matches HF greedy: {same}")

for req in [reader] + reqs:
    batcher.release(req)
batcher.check_integrity()
print(f"\nbatch of {len(reqs)}: {generated} tokens in {elapsed:.2f} s = {generated / elapsed:.1f} tokens/s")
print(f"every request matches HF greedy: {all_match}")
raise SystemExit(0 if all_match else 1)
