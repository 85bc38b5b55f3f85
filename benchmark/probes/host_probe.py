"""GPU probe for chapter 22: where does the host's time go in the scheduler loop, and when does it stall the GPU?

    PYTHONPATH=$(python -m tools.course tree 26 --sol):. python -m benchmark.probes.host_probe --out host.json

Two measurements on the final reference tree:

1. copies: how long `tensor.to("cuda", non_blocking=True)` keeps the host while the GPU is busy (a 20 ms sleep
   kernel queued first), from pageable and from pinned memory, by size. A call that returns after ~20 ms waited
   for the queue: the overlap of chapter 11 is lost for that step.
2. loop: the benchmark workload through our best configuration (one warm run, then one timed plain and one
   instrumented), every loop iteration split into scheduling, preparing the batch (slots, flattened inputs,
   metadata), launching the forward pass, the copy of the tokens, waiting for the GPU and processing the
   previous batch's tokens; Python's garbage collections are timed too. Iterations much slower than their
   neighbours are listed with their split.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

from minisgl.benchmark.driver import BatchLog, _run_once, flush_prefix_cache, ours_config, submit
from minisgl.benchmark.random_model import make_model
from minisgl.benchmark.workload import nano_vllm_workload
from minisgl.core import SamplingParams
from minisgl.llm import LLM


def copy_times(sleep_ms: float = 20.0) -> list[dict]:
    cycles = int(sleep_ms * 1e-3 * torch.cuda.get_device_properties(0).clock_rate * 1e3)
    rows = []
    for n in (256, 1024, 4096, 16384, 65536, 262144):
        for pinned in (False, True):
            src = torch.arange(n, dtype=torch.int32)
            if pinned:
                src = src.pin_memory()
            times = []
            for _ in range(5):
                torch.cuda.synchronize()
                torch.cuda._sleep(cycles)
                t = time.perf_counter()
                dst = src.to("cuda", non_blocking=True)
                times.append((time.perf_counter() - t) * 1e3)
                torch.cuda.synchronize()
                assert torch.equal(dst.cpu(), src)
            rows.append({"bytes": 4 * n, "pinned": pinned, "host_ms": statistics.median(times),
                         "gpu_busy_ms": sleep_ms})
            print(rows[-1], flush=True)
    return rows


class Split:
    """Per loop iteration: seconds in each instrumented part (nested parts are subtracted later)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.cur: dict = defaultdict(float)
        self.gc_start = 0.0

    def wrap(self, obj, name: str, key: str) -> None:
        fn = getattr(obj, name)

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cur[key] += time.perf_counter() - t

        setattr(obj, name, timed)

    def on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.gc_start = time.perf_counter()
        else:
            self.cur["gc"] += time.perf_counter() - self.gc_start
            key = f"gc{info['generation']}"
            self.cur[key] = int(self.cur.get(key, 0)) + 1  # a count, not seconds

    def close(self, log: BatchLog, t: float) -> None:
        row = dict(self.cur)
        row["t"] = t
        row["phase"], row["batch"] = (log.phases[-1], len(log.steps[-1][0])) if log.phases else ("", 0)
        self.rows.append(row)
        self.cur = defaultdict(float)


def instrumented_run(llm, workload) -> dict:
    s, log, split = llm.scheduler, BatchLog(), Split()
    for obj, name, key in [(s, "schedule_next_batch", "schedule"), (s, "prepare_batch", "prepare"),
                           (s.engine, "forward_batch", "forward"), (s, "_launch", "launch"),
                           (s, "_process_last_data", "process"), (s.cache_manager, "cache_req", "cache_req")]:
        split.wrap(obj, name, key)
    process = s._process

    def waiting_process(data) -> None:
        t = time.perf_counter()
        if data is not None and data.ready is not None:
            data.ready.synchronize()
        split.cur["wait"] += time.perf_counter() - t
        process(data)

    s._process = waiting_process
    flush_prefix_cache(s)
    s.on_batch = log.on_batch
    gc.callbacks.append(split.on_gc)
    torch.cuda.synchronize()
    t0 = last = time.perf_counter()
    submit(s, workload)

    def on_step() -> None:
        nonlocal last
        now = time.perf_counter()
        split.cur["iteration"] = now - last
        split.close(log, now - t0)
        last = now

    try:
        s.run_until_idle(on_step)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    finally:
        gc.callbacks.remove(split.on_gc)
        for name in ("schedule_next_batch", "prepare_batch", "_launch", "_process_last_data", "_process"):
            delattr(s, name)
        del s.engine.forward_batch, s.cache_manager.cache_req
        s.on_batch = None
    s.finished.clear()
    rows = split.rows
    for r in rows:  # exclusive times: launch = prepare + forward + the copy of the tokens and its event
        r["tokens_copy"] = r.get("launch", 0) - r.get("prepare", 0) - r.get("forward", 0)
        r["process"] = r.get("process", 0)
        r["other"] = r["iteration"] - sum(r.get(k, 0) for k in ("schedule", "launch", "wait", "process"))
    keys = ["schedule", "prepare", "forward", "tokens_copy", "wait", "process", "cache_req", "gc", "other",
            "iteration"]
    by_phase: dict = defaultdict(lambda: defaultdict(float))
    for r in rows:
        p = by_phase[r["phase"] if r["phase"] != "decode" else f"decode {'>128' if r['batch'] > 128 else '<=128'}"]
        p["iterations"] += 1
        for k in keys:
            p[k] += r.get(k, 0)
    slow = []
    for i, r in enumerate(rows):
        near = [x["iteration"] for x in rows[max(0, i - 5): i + 6] if x is not r and x["phase"] == r["phase"]]
        if r["phase"] == "decode" and near and r["iteration"] > 1.6 * statistics.median(near):
            slow.append({"i": i, **{k: (round(v * 1e3, 3) if isinstance(v, float) and k != "t" else v)
                                    for k, v in r.items()}, "neighbours_ms": round(statistics.median(near) * 1e3, 3)})
    return {"wall_s": wall, "iterations": len(rows),
            "by_phase_s": {k: dict(v) for k, v in by_phase.items()},
            "gc": {"collections": sum(r.get(f"gc{g}", 0) for r in rows for g in range(3)),
                   "gen2": sum(r.get("gc2", 0) for r in rows), "seconds": sum(r.get("gc", 0) for r in rows)},
            "slow_iterations": slow,
            "rows": [{k: (round(v * 1e6) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]}


def host_ops(llm, workload, threshold_ms: float = 2.0) -> dict:
    """One more run under torch.profiler (host side): every host op or CUDA runtime call longer than threshold_ms
    with its chain of parents, and the host time by op name of the first prefill iteration and of a decode
    iteration at batch 256 (op names at the top of their stacks)."""
    from torch.profiler import ProfilerActivity, profile

    s, log = llm.scheduler, BatchLog()
    marks: list[float] = []
    e = s.engine
    named = [(s, "schedule_next_batch"), (s, "prepare_batch"), (s.cache_manager, "allocate_paged"),
             (e.attn_backend, "prepare_metadata"), (e, "_sample"), (s, "_process_last_data"),
             (s.cache_manager, "cache_req"), (e.model, "forward")]
    if e.graph_runner is not None:
        named.append((e.graph_runner, "replay"))
    for obj, name in named:
        fn = getattr(obj, name)
        setattr(obj, name, torch.profiler.record_function(f"<{name}>")(fn))
    flush_prefix_cache(s)
    s.on_batch = log.on_batch
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.profiler.record_function("iteration"):
            submit(s, workload)
        s.run_until_idle(lambda: marks.append(len(marks)))
        torch.cuda.synchronize()
    s.on_batch = None
    s.finished.clear()
    for obj, name in named:
        delattr(obj, name)
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    long = []
    for e in events:
        ms = e.time_range.elapsed_us() / 1000
        if ms >= threshold_ms and e.name not in ("iteration",):
            chain, p = [], e.cpu_parent
            while p is not None:
                chain.append(p.name)
                p = p.cpu_parent
            long.append({"op": e.name, "ms": round(ms, 3), "start_ms": round(e.time_range.start / 1000, 3),
                         "parents": chain[:6], "children": sorted({c.name for c in e.cpu_children})[:12]})
    long.sort(key=lambda r: r["start_ms"])
    top = defaultdict(float)
    for e in events:
        if e.cpu_parent is None:
            top[e.name] += e.time_range.elapsed_us() / 1000
    inside: dict = {}
    for m in {f"<{name}>" for _, name in named}:
        total, kids, n = 0.0, defaultdict(float), 0
        for ev in events:
            if ev.name == m:
                n += 1
                total += ev.time_range.elapsed_us() / 1000
                for c in ev.cpu_children:
                    kids[c.name] += c.time_range.elapsed_us() / 1000
        inside[m] = {"calls": n, "ms": round(total, 3), "self_ms": round(total - sum(kids.values()), 3),
                     "children_ms": {k: round(v, 3) for k, v in sorted(kids.items(), key=lambda kv: -kv[1])[:12]}}
    return {"long_host_events": long[:200], "inside": inside,
            "top_level_ms": dict(sorted(top.items(), key=lambda kv: -kv[1])[:40]),
            "runtime_calls_ms": {k: round(v, 3) for k, v in sorted(
                ((n, sum(e.time_range.elapsed_us() for e in events if e.name == n) / 1000)
                 for n in {e.name for e in events if e.name.startswith("cuda")}), key=lambda kv: -kv[1])[:15]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path("build/bench/qwen3-0.6b-random"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-ops", action="store_true", help="skip the profiled run (host ops, runtime calls)")
    args = ap.parse_args()
    out = {"gpu": torch.cuda.get_device_name(), "copies": copy_times()}
    make_model(args.model)
    workload = nano_vllm_workload()
    kwargs, overlap = ours_config("ours", torch.device("cuda"), workload)
    llm = LLM(args.model, max_extend_tokens=16384, overlap=overlap, dtype="bfloat16", **kwargs)
    llm.generate([ids[:8] for ids, _ in workload[:2]], SamplingParams(max_tokens=4, ignore_eos=True))
    plain = [_run_once(llm, workload, "ours", None, 16384, torch.device("cuda")).wall_s for _ in range(3)]
    out["plain_wall_s"] = plain  # the first is the warm-up run
    print("plain", plain, flush=True)
    out["loop"] = instrumented_run(llm, workload)
    print(json.dumps({k: v for k, v in out["loop"].items() if k != "rows"}, indent=1), flush=True)
    if args.no_ops:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        return
    out["host_ops"] = host_ops(llm, workload)
    print(json.dumps(out["host_ops"], indent=1)[:20000], flush=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
