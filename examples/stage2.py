# %% [markdown]
# # Stage 2 milestone: schedule well
#
# The engine of chapters 7-11 on SmolLM2-135M-Instruct: a scheduler with continuous batching, a paged KV
# pool with admission control, a radix prefix cache, chunked prefill and overlap scheduling. Three
# experiments, each against the simpler way of Stage 1 or an option switched off:
#
# 1. eight requests in one `generate` call vs Stage 1's hand-filled batches, on the same four rows;
# 2. four prompts sharing a system prompt: prompt tokens computed with the naive vs the radix cache;
# 3. a long prompt split into `max_extend_tokens` chunks.
#
# Last, a timeline of which request ran in which batch, drawn from the run of experiment 1.
#
# This file is both a script (`python -m tools.course example stage2`) and the source of
# `notebooks/stage2.ipynb` (jupytext percent format; `make notebooks` regenerates the notebook).
# In `make lab CH=11` (or later) the engine is importable.

# %%
import time

from transformers import AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.llm import LLM
from minisgl.scheduler.prefill import ChunkedReq
from minisgl.teaching.manual import ManualBatcher
from tools.models import model_path_from_env
from tools.plots import draw_timeline

path = model_path_from_env("smollm2")


def chat(tokenizer, question, system=None):
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)


# %% [markdown]
# ## 1. Continuous batching vs hand-filled batches
#
# Eight requests of very different lengths (at most 64 tokens for two story-like questions, 6 to 12 for
# the others; each also stops at EOS), four rows of the page table. Stage 1 fills a batch of four by hand
# and runs it until its longest request is done, then the next four: a row whose request finished stays
# empty. The scheduler gives a freed row to the next waiting request at once.

# %%
questions = ["Describe a rainy afternoon in a small town.", "What is the capital of France?", "What is 2 + 2?",
             "Name a primary color.", "Say hello.", "What is the opposite of hot?",
             "How many legs does a spider have?", "Write a short story about a lost key."]
params = [SamplingParams(max_tokens=n) for n in (64, 8, 12, 8, 10, 6, 12, 64)]
prompts = [chat(AutoTokenizer.from_pretrained(path), q) for q in questions]
# Stage 1 on an engine of its own: its slot allocator must never hand out KV that the scheduler's cache holds.
batcher = ManualBatcher(Engine(EngineConfig(path, max_running_reqs=4, max_seq_len=512)))
batcher.generate(prompts[:1], SamplingParams(max_tokens=2))  # warm-up: first-call costs stay out of the timings


def hand_filled(group, group_params):
    """Stage 1: admit a group, prefill it, decode until its last request is done, release it."""
    reqs = [batcher.add(p, sp) for p, sp in zip(group, group_params)]
    batcher.run(reqs)
    for r in reqs:
        batcher.release(r)
    return [r.output_ids for r in reqs], max(len(r.output_ids) for r in reqs)  # 1 prefill + decodes


t0 = time.perf_counter()
manual_a, steps_a = hand_filled(prompts[:4], params[:4])
manual_b, steps_b = hand_filled(prompts[4:], params[4:])
manual_s = time.perf_counter() - t0
manual = manual_a + manual_b
batcher.check_integrity()

# The scheduler's engine is created after Stage 1's is done: one engine runs at a time in a process (the
# layers read chapter 1's global context, which the newest engine sets).
llm = LLM(path, max_running_reqs=4, max_seq_len=512)
llm.generate(prompts[:1], SamplingParams(max_tokens=2))  # warm-up

timeline = []
llm.scheduler.on_batch = lambda b: timeline.append(
    [(r.uid, "chunk" if isinstance(r, ChunkedReq) else "prefill" if b.is_prefill else "decode") for r in b.reqs])
t0 = time.perf_counter()
outputs = llm.generate(prompts, params)
sched_s = time.perf_counter() - t0
llm.scheduler.on_batch = None

tokens = sum(len(o["token_ids"]) for o in outputs)
print(f"{'8 requests, 4 rows':<34}{'tokens':>7}{'batches':>9}{'seconds':>9}{'tokens/s':>10}")
print(f"{'Stage 1: two hand-filled batches':<34}{sum(map(len, manual)):>7}{steps_a + steps_b:>9}{manual_s:>9.2f}"
      f"{sum(map(len, manual)) / manual_s:>10.1f}")
print(f"{'Stage 2: LLM.generate':<34}{tokens:>7}{len(timeline):>9}{sched_s:>9.2f}{tokens / sched_s:>10.1f}")
print(f"speed-up: {manual_s / sched_s:.2f}x; same tokens both ways: "
      f"{[o['token_ids'] for o in outputs] == manual}")
print(f"tokens per request: {[len(o['token_ids']) for o in outputs]}")

# %% [markdown]
# ## 2. A shared system prompt: naive vs radix cache
#
# Four requests start with the same system prompt. The first arrives alone; the other three come after
# it. With the radix cache they find the system prompt's KV already computed and only compute their own
# question. (Answers are short, so decoding, which both caches do alike, is most of the wall time.)

# %%
system = ("You are a museum guide in Paris. You answer visitors' questions in one or two friendly sentences, "
          "you never invent opening hours, and you suggest a nearby cafe when someone looks tired.")
visitors = ["Where is the Mona Lisa?", "Is the museum big?", "Can I take photos?", "I am tired."]
print(f"{'cache':<7}{'prompt tokens':>14}{'computed':>10}{'seconds':>9}")
answers = {}
for cache_type in ("naive", "radix"):
    guide = LLM(path, max_running_reqs=4, max_seq_len=512, cache_type=cache_type)
    guide_prompts = [chat(guide.tokenizer, v, system) for v in visitors]
    computed = []
    guide.scheduler.on_batch = lambda b: computed.extend(r.extend_len for r in b.reqs if b.is_prefill)
    t0 = time.perf_counter()
    outs = guide.generate(guide_prompts[:1], SamplingParams(max_tokens=16))
    outs += guide.generate(guide_prompts[1:], SamplingParams(max_tokens=16))
    answers[cache_type] = [o["token_ids"] for o in outs]
    print(f"{cache_type:<7}{sum(map(len, guide_prompts)):>14}{sum(computed):>10}{time.perf_counter() - t0:>9.2f}")
    guide.scheduler.check_integrity()
print(f"same answers with both caches: {answers['naive'] == answers['radix']}")

# %% [markdown]
# ## 3. A long prompt in chunks
#
# With `max_extend_tokens=128` no batch computes more than 128 new tokens: a longer prompt runs in chunks,
# each a `ChunkedReq` that writes KV but samples nothing, and its last piece samples the first token.

# %%
long_text = " ".join(f"Note {i}: the scheduler admitted request {i} into row {i % 4} after checking the pool."
                     for i in range(20))
chunky = LLM(path, max_running_reqs=2, max_seq_len=1024, max_extend_tokens=128)
long_prompt = chat(chunky.tokenizer, "Summarize these notes in one sentence. " + long_text)
pieces = []
chunky.scheduler.on_batch = lambda b: pieces.extend(
    (r.extend_len, isinstance(r, ChunkedReq)) for r in b.reqs if b.is_prefill)
summary = chunky.generate([long_prompt], SamplingParams(max_tokens=24))[0]
print(f"prompt of {len(long_prompt)} tokens, max_extend_tokens 128 -> prefill batches of "
      + " + ".join(f"{n}{' (chunk)' if c else ''}" for n, c in pieces))
print(f"answer: {summary['text'].strip()!r}")
chunky.scheduler.check_integrity()

# %% [markdown]
# ## 4. The timeline of experiment 1
#
# One row per request, one column per batch. The first four requests take the four rows; as soon as one
# finishes, the next waiting request is prefilled (red) and then decodes (green) with the others.

# %%
first = min(uid for batch in timeline for uid, _ in batch)  # uids count on from the warm-up request
timeline = [[(uid - first, kind) for uid, kind in batch] for batch in timeline]
png = draw_timeline(timeline, "stage2_timeline",
                    "8 requests on 4 rows: who ran in which batch (SmolLM2, LLM.generate)")
print(f"timeline of {len(timeline)} batches written to {png.relative_to(png.parents[2])}")
joins = [step for step, batch in enumerate(timeline) if step > 0 and any(k == "prefill" for _, k in batch)]
print(f"batches where a waiting request joined the running ones: {joins}")
