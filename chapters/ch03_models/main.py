"""Chapter 3 example: load SmolLM2 into our own model classes and generate greedily, recomputing everything."""

import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl.core import Batch, Context, Req, SamplingParams, set_global_ctx
from minisgl.models import load_model
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
model, config = load_model(path)
tok = AutoTokenizer.from_pretrained(path)
print(f"{config.architecture}: {config.num_layers} layers, hidden {config.hidden_size}, "
      f"{config.num_qo_heads} q heads / {config.num_kv_heads} kv heads, vocab {config.vocab_size}")

ctx = Context()
set_global_ctx(ctx)


@torch.inference_mode()
def next_logits(ids: list[int]) -> torch.Tensor:
    req = Req(torch.tensor(ids, dtype=torch.int32), 0, 0, 1, 0, SamplingParams(max_tokens=1))
    batch = Batch([req], "prefill")
    batch.input_ids, batch.positions = torch.tensor(ids), torch.arange(len(ids))
    with ctx.forward_batch(batch):
        return model.forward()[0]


messages = [{"role": "user", "content": "What is the capital of France?"}]
ids = list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))
hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
with torch.inference_mode():
    ref = hf(torch.tensor([ids])).logits[0, -1]
ours = next_logits(ids)
print(f"last-token logits vs HF: relative difference {float((ours - ref).norm() / ref.norm()):.1e}\n")

seq = list(ids)
while len(seq) - len(ids) < 32 and seq[-1] not in config.eos_token_ids:
    seq.append(int(next_logits(seq).argmax()))
with torch.inference_mode():
    ref = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), do_sample=False,
                      max_new_tokens=32)[0, len(ids):].tolist()
print("answer:", tok.decode(seq[len(ids):], skip_special_tokens=True).strip())
print(f"matches HF greedy: {seq[len(ids):] == ref}")


def best_time(n: int, repeats: int = 3) -> float:
    ids_n = [(i % 1000) + 10 for i in range(n)]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        next_logits(ids_n)
        times.append(time.perf_counter() - t0)
    return min(times)


print("\nwithout a KV cache, the token after a sequence of n tokens costs a forward pass over all n:")
for n in (32, 128, 512):
    print(f"  n = {n:<4} {best_time(n) * 1e3:7.0f} ms")
