"""Chapter 18 example: which batch sizes are captured, how much padding a batch gets, and the engine with
CUDA graphs on and off giving the same tokens. On a GPU it also times decode steps with and without graphs;
on a CPU the graphs are EagerGraph (rerun eagerly), so there is nothing to gain and only correctness shows."""

import time

import torch

from minisgl.core import SamplingParams
from minisgl.engine.graph import capture_sizes
from minisgl.llm import LLM
from tools.models import model_path_from_env

sizes = capture_sizes(256)
print(f"capture sizes for max_bs 256: {len(sizes)} graphs: {sizes[:6]} ... {sizes[-2:]}")
waste = [min(s for s in sizes if s >= n) - n for n in range(1, 257)]
print(f"padding over batch sizes 1..256: at most {max(waste)} dummy requests, {sum(waste) / 256:.1f} on average")

on_cuda = torch.cuda.is_available()
path = model_path_from_env("smollm2")
prompts = ["The capital of France is", "List three colors:", "Write a haiku about the sea.", "2 + 2 =",
           "Name a planet.", "Why is the sky blue?"]
params = [SamplingParams(max_tokens=n) for n in (6, 9, 12, 15, 18, 21)]  # batches shrink: 6, 5, ..., 1
results = {}
for graphs in (0, 6):
    llm = LLM(path, max_running_reqs=6, max_seq_len=256, cuda_graph_max_bs=graphs)
    runner = llm.engine.graph_runner
    replayed = []
    if runner is not None:
        real = runner.replay
        runner.replay = lambda batch, real=real: replayed.append(batch.size) or real(batch)
    llm.generate(prompts[:1], SamplingParams(max_tokens=2))  # warm-up
    replayed.clear()
    llm.scheduler.history.clear()
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    if on_cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    decodes = [len(uids) for phase, uids in llm.scheduler.history if phase == "decode"]
    results[graphs] = [o["token_ids"] for o in outputs]
    label = f"graphs up to {graphs}" if graphs else "no graphs"
    print(f"{label:>16}: {len(decodes)} decode batches (sizes {sorted(set(decodes))}), "
          f"{len(replayed)} replayed; {seconds:.2f} s")
    if graphs:
        padded = [min(s for s in runner.sizes if s >= n) for n in replayed]
        print(f"{'':>16}  replayed sizes {sorted(set(replayed))} ran as {sorted(set(padded))} "
              f"({sum(padded) - sum(replayed)} dummy rows in all)")
print("first answer:", repr(outputs[0]["text"]))
print("graphs on and off give the same tokens:", results[0] == results[6])
if not on_cuda:
    print("(no GPU here: EagerGraph replays rerun the forward pass, so the time is the same or worse)")
