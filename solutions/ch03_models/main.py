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

seq, times = list(ids), []
while len(times) < 32 and seq[-1] not in config.eos_token_ids:
    t0 = time.perf_counter()
    seq.append(int(next_logits(seq).argmax()))
    times.append(time.perf_counter() - t0)
with torch.inference_mode():
    ref = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), do_sample=False,
                      max_new_tokens=32)[0, len(ids):].tolist()
print("answer:", tok.decode(seq[len(ids):], skip_special_tokens=True).strip())
print(f"matches HF greedy: {seq[len(ids):] == ref}")
print(f"\nwithout a KV cache every step recomputes the whole sequence: step 1 took {times[0] * 1e3:.0f} ms "
      f"({len(ids)} tokens), step {len(times)} took {times[-1] * 1e3:.0f} ms ({len(seq) - 1} tokens)")
