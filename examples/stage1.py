# %% [markdown]
# # Stage 1 milestone: one request vs a batch of four
#
# SmolLM2-135M-Instruct runs through the paged engine of chapters 1-6 twice: once with one request, once
# with four requests in one batch, 48 tokens each (`ignore_eos`, so every request generates exactly 48).
#
# Decoding reads every weight once per step whatever the batch size, so a batch of four costs little more
# than one request per step: throughput grows almost with the batch.
#
# This file is both a script (`python -m tools.course example stage1`) and the source of
# `notebooks/stage1.ipynb` (jupytext percent format; `make notebooks` regenerates the notebook).
# In `make lab CH=6` (or later) the engine is importable.

# %%
import time

from transformers import AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.teaching.manual import ManualBatcher
from tools.models import model_path_from_env

# %% [markdown]
# Load the model into an engine with room for four running requests, and build four chat prompts.
# `ManualBatcher` fills the batches by hand (the scheduler comes in Stage 2). One tiny warm-up
# generation keeps first-call costs out of the timings.

# %%
path = model_path_from_env("smollm2")
tok = AutoTokenizer.from_pretrained(path)
engine = Engine(EngineConfig(path, max_running_reqs=4, max_seq_len=512))
batcher = ManualBatcher(engine)
topics = ["the moon", "bread", "rivers", "music"]
prompts = [tok.apply_chat_template([{"role": "user", "content": f"Tell me about {t}."}], add_generation_prompt=True,
                                   tokenize=True, return_dict=False) for t in topics]
params = SamplingParams(max_tokens=48, ignore_eos=True)
batcher.generate([prompts[0]], SamplingParams(max_tokens=2))  # warm-up

# %% [markdown]
# Time one request alone, then all four in one batch.

# %%
def timed(batch_prompts):
    t0 = time.perf_counter()
    outs = batcher.generate(batch_prompts, params)
    return outs, time.perf_counter() - t0


single_out, single_s = timed(prompts[:1])
batch_out, batch_s = timed(prompts)

# %% [markdown]
# Throughput in generated tokens per second. Greedy decoding is deterministic, so request 0 must generate
# the same tokens alone and inside the batch. Last, the KV cache must be consistent after the runs.

# %%
single_tps = len(single_out[0]) / single_s
batch_tps = sum(map(len, batch_out)) / batch_s
print(f"{'run':<18}{'tokens':>8}{'seconds':>9}{'tokens/s':>10}")
print(f"{'1 request':<18}{len(single_out[0]):>8}{single_s:>9.2f}{single_tps:>10.1f}")
print(f"{'batch of 4':<18}{sum(map(len, batch_out)):>8}{batch_s:>9.2f}{batch_tps:>10.1f}")
print(f"\nbatching speed-up: {batch_tps / single_tps:.1f}x")
print(f"request 0 alone and in the batch generate the same tokens: {single_out[0] == batch_out[0]}")
for topic, out in zip(topics, batch_out):
    print(f"  {topic:<6} -> {tok.decode(out, skip_special_tokens=True).strip()[:70]!r}")
batcher.check_integrity()
