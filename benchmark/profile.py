"""python -m benchmark.profile: where the time of our best configuration goes (GPU; `make profile`).

    python -m benchmark.profile --model build/bench/qwen3-0.6b-random --out build/profile

Three views, written as profile.json, profile.md (tables for the book) and profile.png (the timeline):

1. kernels of one steady step: torch.profiler around a few decode steps at batch 256 and at batch 8, and
   around prefill batches of 16,384 prompt tokens; per step: GPU kernels launched, their summed time, the
   host's aten::cat calls, and the kernels that take the most time.
2. the per-phase timeline of the whole benchmark workload: how long each batch took on the host clock of the
   scheduler loop (with overlap the loop runs as fast as the GPU once the GPU is the bottleneck), summed by
   phase: prefill, and decode by batch size (129-256, 33-128, 9-32, 1-8); and how much of it the host spent
   waiting for the GPU. A phase whose wait is near zero is bound by the host: the GPU finished each batch
   before the loop had the next one ready.
3. the GPU's account of the whole workload: every kernel of one more run, summed by kind (decode attention,
   prefill attention, GEMMs, the rest), and how long the GPU ran no kernel at all (the wall time minus the
   union of the kernels' intervals): time the host or a wait left the GPU idle.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import defaultdict
from pathlib import Path

import torch

from minisgl.benchmark.driver import BatchLog, flush_prefix_cache, ours_config, submit
from minisgl.benchmark.workload import Workload, describe, nano_vllm_workload
from minisgl.core import SamplingParams

PHASES = [("prefill", None), ("decode 129-256", (129, 256)), ("decode 33-128", (33, 128)),
          ("decode 9-32", (9, 32)), ("decode 1-8", (1, 8))]


def phase_of(phase: str, batch: int) -> str:
    if phase != "decode":
        return "prefill"
    return next(name for name, span in PHASES[1:] if span[0] <= batch <= span[1] or name == "decode 1-8")


def run_loop(llm, workload: Workload, on_step=None) -> tuple[BatchLog, list[float], float]:
    """Run the workload through the scheduler loop on an empty prefix cache (as a fresh engine: a run after
    another of the same prompts would find them cached); (batches, host time after each iteration, t0)."""
    scheduler, log, marks = llm.scheduler, BatchLog(), []
    flush_prefix_cache(scheduler)

    def step() -> None:
        marks.append(time.perf_counter())
        if on_step is not None:
            on_step(log)

    scheduler.on_batch = log.on_batch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    uids = submit(scheduler, workload)
    try:
        scheduler.run_until_idle(step)
    finally:
        scheduler.on_batch = None
    for uid in uids:
        scheduler.take_finished(uid)
    return log, marks, t0


def kernel_table(llm, workload: Workload, phase: str, skip: int, steps: int, top: int = 12) -> dict:
    """Profile `steps` batches of `phase` after the first `skip` of them; per-step kernel statistics."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    window: list[tuple[int, float]] = []  # (batches launched, host time) where profiling started and stopped

    def on_step(log: BatchLog) -> None:
        seen = log.phases.count(phase)
        if not window and seen == skip:
            torch.cuda.synchronize()
            window.append((len(log.phases), time.perf_counter()))
            prof.start()
        elif len(window) == 1 and seen == skip + steps:
            torch.cuda.synchronize()
            prof.stop()
            window.append((len(log.phases), time.perf_counter()))

    log, _, _ = run_loop(llm, workload, on_step)
    if len(window) != 2:
        raise RuntimeError(f"the workload ran {log.phases.count(phase)} {phase} batches, fewer than {skip + steps}")
    kernels: dict[str, list[float]] = defaultdict(list)
    cats = 0
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            kernels[evt.name].append(evt.time_range.elapsed_us())
        elif evt.name == "aten::cat":
            cats += 1
    rows = sorted(((name, len(t) / steps, sum(t) / steps / 1000) for name, t in kernels.items()),
                  key=lambda r: -r[2])
    contexts, new_tokens = log.steps[window[0][0]]  # the first profiled batch
    return {"phase": phase, "batch": len(contexts), "new_tokens": new_tokens, "steps": steps,
            "kernels_per_step": sum(r[1] for r in rows), "gpu_ms_per_step": sum(r[2] for r in rows),
            "cat_per_step": cats / steps,
            "wall_ms_per_step": 1000 * (window[1][1] - window[0][1]) / steps,  # profiler overhead included
            "top": [{"kernel": n[:90], "per_step": c, "ms": ms} for n, c, ms in rows[:top]]}


def decode_shape(batch: int, prompt: int, steps: int) -> Workload:
    gen = torch.Generator().manual_seed(batch)
    return [(torch.randint(0, 10000, (prompt,), generator=gen).tolist(), steps) for _ in range(batch)]


def timed_waits(scheduler) -> list[float]:
    """Record, per loop iteration, how long the host waits for the GPU to finish the batch it processes
    (the previous iteration's, with overlap). Returns the list it appends to."""
    waits: list[float] = []
    process = scheduler._process

    def waiting_process(data) -> None:
        t = time.perf_counter()
        if data is not None and data.ready is not None:
            data.ready.synchronize()
        waits.append(time.perf_counter() - t)
        process(data)

    scheduler._process = waiting_process
    return waits


def timeline(llm, workload: Workload) -> dict:
    waits = timed_waits(llm.scheduler)
    try:
        log, marks, t0 = run_loop(llm, workload)
    finally:
        del llm.scheduler._process  # the method of the class again
    times = [b - a for a, b in zip([t0, *marks], marks)][: len(log.phases)]
    # Iteration i launches batch i and waits for batch i - 1 (overlap): the wait belongs to batch i - 1.
    waited = (waits[1:] + [0.0])[: len(times)] if llm.scheduler.config.overlap else waits[: len(times)]
    by: dict[str, list[float]] = {name: [0, 0.0, 0.0] for name, _ in PHASES}
    points = []
    for phase, (contexts, _), dt, wait in zip(log.phases, log.steps, times, waited):
        name = phase_of(phase, len(contexts))
        by[name][0] += 1
        by[name][1] += dt
        by[name][2] += wait
        points.append((phase, len(contexts), dt, wait))
    return {"wall_s": marks[-1] - t0, "points": points,
            "phases": {k: {"steps": n, "seconds": s, "gpu_wait_s": w} for k, (n, s, w) in by.items()}}


# Kinds of kernels, by name (the first pattern that matches wins).
KERNEL_KINDS = [("decode attention (Triton)", r"_decode_kernel|_merge_splits"),
                ("flash-attn, extend attention", r"flash_fwd|_extend_kernel"),  # prefill; decode too in ours-fa
                ("GEMM", r"gemm|nvjet|cutlass|xmma|splitKreduce|cublas"),
                ("norm, RoPE, SiLU, KV store (Triton)", r"^_"),
                ("sampling and the rest", r"")]


def kind_of(kernel: str) -> str:
    return next(kind for kind, pattern in KERNEL_KINDS if re.search(pattern, kernel))


def covered(spans: list[tuple[float, float]]) -> float:
    """The length of the union of intervals (start, end): the time in which at least one kernel ran."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def gpu_account(llm, workload: Workload, top: int = 15) -> dict:
    """Run the workload once under torch.profiler (GPU activity only) and sum its kernels by kind; the GPU's
    idle time is the wall time minus the union of the kernels' intervals."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run_loop(llm, workload)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    spans, by_name = [], defaultdict(float)
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA and "memcpy" not in evt.name.lower() \
                and "memset" not in evt.name.lower():
            spans.append((evt.time_range.start, evt.time_range.end))
            by_name[evt.name] += evt.time_range.elapsed_us() / 1e6
    busy = covered(spans)
    by_kind = defaultdict(float)
    for name, seconds in by_name.items():
        by_kind[kind_of(name)] += seconds
    return {"wall_s": wall, "kernels": len(spans), "busy_s": busy / 1e6, "idle_s": wall - busy / 1e6,
            "kinds": {kind: by_kind[kind] for kind, _ in KERNEL_KINDS},
            "top": [{"kernel": n[:90], "seconds": s} for n, s in sorted(by_name.items(), key=lambda r: -r[1])[:top]]}


def markdown(result: dict) -> str:
    out = [f"Profile of `{result['config']}` on {result['gpu']}.", "",
           "| step | batch | new tokens | kernels/step | GPU kernel time (ms) | host time (ms) | aten::cat/step |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name, k in result["kernels"].items():
        out.append(f"| {name} | {k['batch']} | {k['new_tokens']:,} | {k['kernels_per_step']:.0f} | "
                   f"{k['gpu_ms_per_step']:.2f} | {k['wall_ms_per_step']:.2f} | {k['cat_per_step']:.0f} |")
    for name, k in result["kernels"].items():
        out += ["", f"Top kernels, {name}:", "", "| kernel | per step | ms/step |", "|---|---:|---:|"]
        out += [f"| `{t['kernel']}` | {t['per_step']:.0f} | {t['ms']:.3f} |" for t in k["top"]]
    t = result["timeline"]
    out += ["", f"Timeline of the benchmark workload: {t['wall_s']:.2f} s in all.", "",
            "| phase | steps | seconds | ms/step | host waiting for the GPU (ms/step) |", "|---|---:|---:|---:|---:|"]
    for name, p in t["phases"].items():
        if p["steps"]:
            out.append(f"| {name} | {p['steps']} | {p['seconds']:.2f} | {1000 * p['seconds'] / p['steps']:.2f} | "
                       f"{1000 * p['gpu_wait_s'] / p['steps']:.2f} |")
    if "account" in result:
        a = result["account"]
        out += ["", f"The GPU's account of one more run ({a['wall_s']:.2f} s under the profiler, {a['kernels']:,} "
                f"kernels): busy {a['busy_s']:.2f} s, no kernel running {a['idle_s']:.2f} s.", "",
                "| kernels | seconds | share of the busy time |", "|---|---:|---:|"]
        out += [f"| {k} | {v:.2f} | {v / a['busy_s']:.0%} |" for k, v in a["kinds"].items()]
        out += ["", "| kernel | seconds |", "|---|---:|"] + [f"| `{t['kernel']}` | {t['seconds']:.3f} |" for t in a["top"]]
    return "\n".join(out) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["timeline"]["points"]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    x = [sum(p[2] for p in points[:i]) for i in range(len(points))]
    colors = ["#bc4b51" if p[0] != "decode" else "#5b8e7d" for p in points]
    ax.scatter(x, [1000 * p[2] for p in points], c=colors, s=6)
    ax2 = ax.twinx()
    ax2.plot(x, [p[1] for p in points], color="#999999", lw=0.8)
    ax2.set_ylabel("requests in the batch", color="#777777")
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the workload was submitted")
    ax.set_ylabel("step time (ms, log); red: prefill")
    ax.set_title(f"Every batch of the benchmark workload: {result['timeline']['wall_s']:.2f} s", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from minisgl.llm import LLM
    from minisgl.benchmark.random_model import make_model

    ap = argparse.ArgumentParser(prog="python -m benchmark.profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path("build/bench/qwen3-0.6b-random"))
    ap.add_argument("--out", type=Path, default=Path("build/profile"))
    ap.add_argument("--system", default="ours", help="one of our configurations (minisgl.benchmark.driver.OURS)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("make profile needs a CUDA device")
    make_model(args.model)
    device = torch.device("cuda")
    workload = nano_vllm_workload()
    kwargs, overlap = ours_config(args.system, device, workload)
    llm = LLM(args.model, max_extend_tokens=16384, overlap=overlap, dtype="bfloat16", **kwargs)
    llm.generate([workload[0][0][:8]], SamplingParams(max_tokens=4, ignore_eos=True))
    kernels = {
        "decode, batch 256": kernel_table(llm, decode_shape(256, 540, 24), "decode", skip=8, steps=8),
        "decode, batch 8": kernel_table(llm, decode_shape(8, 540, 24), "decode", skip=8, steps=8),
        "prefill, 16,384 tokens": kernel_table(llm, decode_shape(64, 1024, 1), "prefill", skip=1, steps=2),
    }
    result = {"config": args.system, "gpu": torch.cuda.get_device_name(), "workload": describe(workload),
              "kernels": kernels, "timeline": timeline(llm, workload), "account": gpu_account(llm, workload)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    (args.out / "profile.md").write_text(text)
    plot(result, args.out / "profile.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
