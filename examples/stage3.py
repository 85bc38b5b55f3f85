# %% [markdown]
# # Stage 3 milestone: serve it
#
# The engine of Stages 1 and 2 behind an OpenAI-compatible HTTP server (chapters 12-15), on
# SmolLM2-135M-Instruct: a front end (FastAPI), a tokenizer process and a scheduler process, talking over ZMQ.
# This notebook starts the server the way `make serve` does, then talks to it with the official `openai`
# client, exactly as any OpenAI application would:
#
# 1. the model list and a chat completion, greedy, with its finish reason and exact usage;
# 2. a streamed completion: pieces as they arrive, time to first token and time per output token;
# 3. four chats at once (continuous batching behind HTTP), and a streamed request that the client drops;
# 4. a parameter the engine does not support: a 400 with an OpenAI-style error body.
#
# Last, the server is stopped as Ctrl-C stops it, and every process exits.
#
# This file is both a script (`python -m tools.course example stage3`) and the source of
# `notebooks/stage3.ipynb` (jupytext percent format; `make notebooks` regenerates the notebook).
# In `make lab CH=15` (or later) the server is importable.

# %%
import atexit
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai

from minisgl.server.local import LocalServer
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
t0 = time.perf_counter()
# The same command as `make serve` on a free port, with a smaller KV pool; back once /health answers (the workers
# load the model first). Its output is kept, not printed: server.tail() shows it.
server = LocalServer(path, "--max-seq-len", "512", "--max-running-reqs", "8", "--cpu-kv-cache-mb", "64", echo=False)
atexit.register(server.stop)  # never leave a server behind, even if a cell below fails
client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
models = client.models.list()
model = models.data[0].id
print(f"server ready in {time.perf_counter() - t0:.1f} s on port {server.port}; model {model!r}, "
      f"max_model_len {models.data[0].max_model_len}")

# %% [markdown]
# ## 1. A chat completion
#
# `temperature=0` asks for greedy decoding (OpenAI's default temperature is 1). The answer ends on the model's
# end-of-turn token (`finish_reason` "stop") or at `max_tokens` ("length"); `usage` counts the prompt as the
# chat template laid it out, and every generated token.

# %%
question = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
chat = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=48)
print(f"answer: {chat.choices[0].message.content!r}")
print(f"finish_reason {chat.choices[0].finish_reason!r}, usage: {chat.usage.prompt_tokens} prompt + "
      f"{chat.usage.completion_tokens} completion = {chat.usage.total_tokens} tokens")

# %% [markdown]
# ## 2. A streamed completion
#
# With `stream=True` the server sends one server-sent event per piece of text, as soon as the detokenizer
# lets it out. The client measures the time to the first piece (TTFT: queueing, tokenizing and the prefill)
# and the time per output token after it (TPOT: one decode step each). `include_usage` adds a last chunk with
# the token counts.

# %%
sent = time.perf_counter()
arrivals, pieces, usage, reason = [], [], None, None
stream = client.completions.create(model=model, prompt="Once upon a time, in a small village by the sea,",
                                   temperature=0, max_tokens=64, stream=True,
                                   stream_options={"include_usage": True})
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.text:
            arrivals.append(time.perf_counter() - sent)
            pieces.append(choice.text)
        reason = choice.finish_reason or reason
total = time.perf_counter() - sent
print("".join(pieces))
ttft = arrivals[0]
tpot = (arrivals[-1] - arrivals[0]) / max(usage.completion_tokens - 1, 1)
print(f"\n{len(pieces)} pieces, {usage.completion_tokens} tokens, finish_reason {reason!r}")
print(f"TTFT {ttft * 1000:.0f} ms, TPOT {tpot * 1000:.0f} ms, {usage.completion_tokens / total:.1f} tokens/s "
      f"for one stream")

# %% [markdown]
# ## 3. Four clients at once, and one that hangs up
#
# Four chats sent together from four threads are batched by the scheduler like any other requests: the
# server's output rate grows with the number of clients, although each one's stream gets a little slower.
# Then a streamed request is dropped after three pieces (the client closes the connection): the server
# notices, aborts the request and frees its KV pages, which the status endpoint `/health` confirms.

# %%
topics = ["the sea", "a mountain", "a city at night", "an old library"]


def ask(topic: str):
    return client.chat.completions.create(model=model, temperature=0, max_tokens=32,
                                          messages=[{"role": "user", "content": f"Write two lines about {topic}."}])


t0 = time.perf_counter()
with ThreadPoolExecutor(len(topics)) as pool:
    answers = list(pool.map(ask, topics))
elapsed = time.perf_counter() - t0
generated = sum(a.usage.completion_tokens for a in answers)
for topic, a in zip(topics, answers):
    print(f"{topic:>16}: {a.choices[0].message.content.strip()[:60]!r}...")
print(f"4 concurrent chats: {generated} tokens in {elapsed:.1f} s = {generated / elapsed:.1f} tokens/s")

stream = client.chat.completions.create(model=model, stream=True, max_tokens=400, temperature=0,
                                        messages=[{"role": "user", "content": "Tell me a very long story."}])
for i, chunk in enumerate(stream):
    if i == 3:
        break
stream.close()  # the client hangs up
for _ in range(40):  # the server notices within a poll interval
    status = httpx.get(f"{server.url}/health").json()
    if status["running"] == 0 and status["waiting"] == 0:
        break
    time.sleep(0.25)
print(f"after the dropped stream: {status['running']} running, {status['waiting']} waiting, "
      f"{status['available_slots']} of {status['total_slots']} KV slots free")

# %% [markdown]
# ## 4. What the server refuses
#
# A parameter the engine cannot honour is refused with a 400 that names it, never dropped in silence: here
# `n=2` (two answers per request). The error body has OpenAI's shape, so the client raises its usual
# `BadRequestError`.

# %%
try:
    client.chat.completions.create(model=model, messages=question, n=2)
except openai.BadRequestError as e:
    print(f"HTTP {e.status_code}: {e.body}")

# %% [markdown]
# ## Stopping the server
#
# SIGINT is what Ctrl-C sends: the front end stops serving, asks the scheduler to exit, stops the tokenizer
# process and removes its sockets.

# %%
code = server.stop(signal.SIGINT)
print(f"server exited with code {code}, leaving {len(server.left_behind)} processes behind; "
      f"its last line: {server.tail(1)!r}")
