"""Chapter 24 example: one chat question answered under chapter 24's settings, in one batch: greedy, greedy with a
repetition penalty (checked against HF generate with the same penalty), OpenAI's frequency and presence penalties,
a logit_bias that bans a word, and seeded min_p sampling."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
MAX_TOKENS = 40
tokenizer = AutoTokenizer.from_pretrained(path)
prompt = tokenizer.apply_chat_template([{"role": "user", "content": "List some fruits, then list them again."}],
                                       add_generation_prompt=True, tokenize=True, return_dict=False)
banned = [tokenizer.encode(w)[0] for w in (" Apples", " Bananas")]  # the first token of each word
SETTINGS = {
    "greedy": dict(),
    "repetition_penalty 1.3": dict(repetition_penalty=1.3),
    "frequency 1.0, presence 0.5": dict(frequency_penalty=1.0, presence_penalty=0.5),
    "logit_bias -100: no Apples, Bananas": dict(logit_bias={t: -100.0 for t in banned}),
    "T 0.8, min_p 0.1, seed 0": dict(temperature=0.8, min_p=0.1, seed=0),
}
llm = LLM(path, max_running_reqs=8, max_seq_len=512)
params = [SamplingParams(max_tokens=MAX_TOKENS, **kw) for kw in SETTINGS.values()]
outputs = llm.generate([prompt] * len(params), params)  # one batch: every row its own settings
for name, out in zip(SETTINGS, outputs):
    print(f"{name:>28}: {out['text']!r}")

hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
with torch.inference_mode():
    x = torch.tensor([prompt])
    want = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=MAX_TOKENS,
                       repetition_penalty=1.3, temperature=None, top_p=None, top_k=None)[0, len(prompt):].tolist()
got = outputs[1]["token_ids"]
print(f"\nrepetition_penalty 1.3 equals HF generate with the same penalty: {got == want}")
print(f"the banned tokens {banned} appear in the biased answer: {any(t in banned for t in outputs[3]['token_ids'])}")
