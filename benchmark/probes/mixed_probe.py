"""Probe for chapter 21: mixed prefill + decode batches off and on, on two scenarios.

    python -m benchmark.probes.mixed_probe --out mixed.json                  # on a GPU: the H200 numbers of the page
    python -m benchmark.probes.mixed_probe --out mixed.json --quick          # on a CPU: tiny-qwen3, a few seconds

Runs on the final reference tree (chapter 22's benchmark package). Each scenario runs with
enable_mixed_chunk off, then on, in the best configuration of chapter 22 (`ours`: attention backend `auto`,
overlap, CUDA graphs):

    workload  chapter 22's workload (nano-vllm's 256 requests, prompts and outputs U[100, 1024]), every
              request submitted at t = 0, prefill budget --max-extend-tokens as `make bench`
    arrival   --decoders requests with short prompts decode steadily; once each has --arrive-after tokens, one
              prompt of --long-prompt tokens arrives, prefilled in chunks of --arrival-budget tokens

and reports output tokens/s, TTFT (mean, p50, p99), TPOT p50/p99 over requests, and the longest gap between
two tokens of one request (for the arrival scenario: of the steady decoders, and the long prompt's TTFT).
The GPU model is chapter 22's random Qwen3-0.6B shape in bf16; --quick uses tiny-qwen3 in float32.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
from pathlib import Path

import torch

from minisgl.benchmark.driver import ours_config
from minisgl.benchmark.metrics import TokenClock, request_latencies
from minisgl.benchmark.random_model import make_model
from minisgl.benchmark.workload import Workload, nano_vllm_workload, quick_workload
from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler.utils import PendingReq


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of values; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def latency_report(traces, wall: float) -> dict:
    lat = [request_latencies(t) for t in traces]
    ttft = [a for a, _ in lat if a is not None]
    tpot = [b for _, b in lat if b is not None]
    gaps = [b - a for t in traces for a, b in zip(t.token_times, t.token_times[1:])]
    ms = lambda x: None if x is None else round(1000 * x, 2)  # noqa: E731
    tokens = sum(t.tokens for t in traces)
    return {"output_tokens": tokens, "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 1),
            "ttft_mean_ms": ms(sum(ttft) / len(ttft)) if ttft else None, "ttft_p50_ms": ms(percentile(ttft, 50)),
            "ttft_p99_ms": ms(percentile(ttft, 99)), "tpot_p50_ms": ms(percentile(tpot, 50)),
            "tpot_p99_ms": ms(percentile(tpot, 99)), "max_gap_ms": ms(max(gaps, default=None))}


class Probe:
    def __init__(self, model: Path, device: str, dtype: str, max_extend_tokens: int) -> None:
        self.model, self.device, self.dtype = model, torch.device(device), dtype
        self.max_extend_tokens = max_extend_tokens

    def llm(self, workload: Workload, mixed: bool, budget: int) -> LLM:
        """An engine for one run. Its KV pool is sized from the workload, never from free memory: an engine sizes
        its pool from the memory free when it starts, so a run after another one (whose memory the allocator may
        still hold) would get a smaller pool, and mixing off and on would not be compared on equal terms."""
        kwargs, overlap = ours_config("ours", self.device, workload)
        page = kwargs.get("page_size", 1)
        kwargs["num_pages"] = sum(-(-(len(ids) + n) // page) for ids, n in workload) + 1  # every request at once
        llm = LLM(self.model, max_extend_tokens=budget, overlap=overlap, enable_mixed_chunk=mixed, dtype=self.dtype,
                  **kwargs)
        llm.generate([workload[0][0][:8]], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up, untimed
        return llm

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def workload(self, workload: Workload, mixed: bool) -> dict:
        """Everything submitted at t = 0, run to the end."""
        llm = self.llm(workload, mixed, self.max_extend_tokens)
        sched = llm.scheduler
        self.sync()
        t0 = time.perf_counter()
        uids = self._submit(sched, workload, first_uid=1 << 40)
        clock = TokenClock(uids, submit=t0)
        sched.on_token = clock.on_token
        sched.run_until_idle()
        self.sync()
        wall = time.perf_counter() - t0
        phases = [phase for phase, _ in sched.history]
        sched.check_integrity()
        slots = sched.cache_manager.num_slots
        self.release(llm)
        return {**latency_report(clock.ordered(uids), wall), "batches": len(phases),
                "mixed_batches": phases.count("mixed"), "kv_slots": slots}

    def release(self, llm: LLM) -> None:
        """Give the engine's memory back before the next run starts."""
        llm.scheduler.on_token = llm.scheduler.on_batch = None
        del llm
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def arrival(self, decoders: Workload, long_prompt: list[int], long_output: int, arrive_after: int,
                budget: int, mixed: bool) -> dict:
        """Steady decoders, then one long prompt that arrives while they decode."""
        llm = self.llm(decoders + [(long_prompt, long_output)], mixed, budget)
        sched = llm.scheduler
        self.sync()
        t0 = time.perf_counter()
        uids = self._submit(sched, decoders, first_uid=2 << 40)
        long_uid = 3 << 40
        clock = TokenClock(uids + [long_uid], submit=t0)
        sched.on_token = clock.on_token

        arrived = []

        def arrive() -> None:
            if not arrived and min(clock.traces[u].tokens for u in uids) >= arrive_after:
                arrived.append(long_uid)
                clock.traces[long_uid].submit = time.perf_counter()  # its TTFT counts from its arrival
                sched.add_request(PendingReq(long_uid, torch.tensor(long_prompt, dtype=torch.int32),
                                             SamplingParams(max_tokens=long_output, ignore_eos=True)))

        sched.run_until_idle(arrive)
        self.sync()
        wall = time.perf_counter() - t0
        sched.check_integrity()
        steady = latency_report(clock.ordered(uids), wall)
        long_ttft, _ = request_latencies(clock.traces[long_uid])
        mixed_batches = [phase for phase, _ in sched.history].count("mixed")
        slots = sched.cache_manager.num_slots
        self.release(llm)
        return {"decoders": steady, "long_prompt_ttft_ms": round(1000 * long_ttft, 2),
                "mixed_batches": mixed_batches, "kv_slots": slots}

    @staticmethod
    def _submit(sched, workload: Workload, first_uid: int) -> list[int]:
        uids = []
        for i, (ids, n) in enumerate(workload):
            uid = first_uid + i
            sched.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32),
                                         SamplingParams(max_tokens=n, ignore_eos=True)))
            uids.append(uid)
        return uids


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="JSON file the results are written to")
    ap.add_argument("--quick", action="store_true", help="tiny-qwen3 on the CPU, tiny sizes (a smoke run)")
    ap.add_argument("--model", type=Path, default=Path("build/bench/qwen3-0.6b-random"))
    ap.add_argument("--max-extend-tokens", type=int, default=16384, help="prefill budget of the workload run")
    ap.add_argument("--decoders", type=int, default=64, help="steady decoders of the arrival scenario")
    ap.add_argument("--decoder-output", type=int, default=512, help="tokens each steady decoder generates")
    ap.add_argument("--long-prompt", type=int, default=16384, help="tokens of the prompt that arrives")
    ap.add_argument("--arrival-budget", type=int, default=2048, help="prefill budget of the arrival run")
    ap.add_argument("--arrive-after", type=int, default=32, help="tokens every decoder has when the prompt arrives")
    args = ap.parse_args(argv)
    if args.quick:
        from tools.models import ensure_model

        probe = Probe(ensure_model("tiny-qwen3"), "cpu", "float32", max_extend_tokens=64)
        workload = quick_workload(max_token_id=900)
        sizes = dict(decoders=4, decoder_output=24, long_prompt=96, arrival_budget=16, arrive_after=2)
    else:
        probe = Probe(make_model(args.model), "cuda", "bfloat16", args.max_extend_tokens)
        workload = nano_vllm_workload()
        sizes = dict(decoders=args.decoders, decoder_output=args.decoder_output, long_prompt=args.long_prompt,
                     arrival_budget=args.arrival_budget, arrive_after=args.arrive_after)
    rng = random.Random(0)
    decoders = [([rng.randint(0, 900) for _ in range(16)], sizes["decoder_output"]) for _ in range(sizes["decoders"])]
    long_prompt = [rng.randint(0, 900) for _ in range(sizes["long_prompt"])]
    report = {"device": torch.cuda.get_device_name() if probe.device.type == "cuda" else "cpu", "arrival": sizes,
              "runs": []}
    for mixed in (False, True):
        run = {"enable_mixed_chunk": mixed, "workload": probe.workload(workload, mixed),
               "arrival": probe.arrival(decoders, long_prompt, 8, sizes["arrive_after"], sizes["arrival_budget"],
                                        mixed)}
        report["runs"].append(run)
        print(json.dumps(run), flush=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
