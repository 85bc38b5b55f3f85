"""Probe for chapter 23: conservative against optimistic admission on chat-like traffic under a tight KV pool.

    python -m benchmark.probes.retract_probe --out retract.json            # on a GPU: the H200 numbers of the page
    python -m benchmark.probes.retract_probe --out retract.json --cpu      # on a CPU: SmolLM2-135M (the page's CPU numbers)
    python -m benchmark.probes.retract_probe --out retract.json --quick    # tiny-qwen3 on a CPU, a smoke run

Runs on the final reference tree. The workload: --requests requests with random prompts of U[--min-prompt,
--max-prompt] tokens, each with a natural answer length drawn from U[--min-answer, --max-answer] and a max_tokens
of --max-tokens, far above it. A request ends at its natural length the way a stop string ends it in the server
(the tokenizer process sees the stop string and aborts the request in the scheduler): the probe aborts it once it
has delivered its last token. Admission cannot know that length, so conservative admission reserves KV for all of
max_tokens. The KV pool is sized to hold --pool-requests requests at their full max_tokens, so conservative
admission runs about that many at once.

Two scenarios: `chat` (answers as above, far shorter than max_tokens) and `long` (answers of U[max_tokens / 2,
max_tokens] tokens: the estimate is too low and requests must be retracted). Every request is submitted at t = 0 (a burst: TTFT includes the time spent waiting for admission). Each admission
policy runs on a fresh engine with the same pool. Reported per run: output tokens/s (delivered tokens over the wall
time), TTFT p50/p99 and TPOT p50 over requests, retractions, tokens prefilled again after a retraction (what
recomputing cost, cached prefixes excluded), the largest decode batch, and the batches run.

The GPU model is chapter 22's random Qwen3-0.6B shape in bf16 (configuration `ours`: flash-attn where it
imports, overlap, CUDA graphs); --cpu uses SmolLM2-135M in float32 and --quick tiny-qwen3.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from minisgl.benchmark.metrics import TokenClock, request_latencies
from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler.retract import NewTokenRatio
from minisgl.scheduler.utils import PendingReq


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of values; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def chat_workload(requests: int, prompt: tuple[int, int], answer: tuple[int, int], max_token_id: int,
                  seed: int = 0) -> list[tuple[list[int], int]]:
    """[(prompt ids, natural answer length)] per request, from its own random.Random(seed)."""
    rng = random.Random(seed)
    out = []
    for _ in range(requests):
        ids = [rng.randint(0, max_token_id) for _ in range(rng.randint(*prompt))]
        out.append((ids, rng.randint(*answer)))
    return out


MEDIAN_KEYS = ("output_tok_s", "wall_s", "cpu_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "retractions",
               "recomputed_tokens", "max_decode_batch", "batches")


def medians(runs: list[dict]) -> list[dict]:
    """One row per (scenario, admission, initial ratio): the median of each measure over its repeats."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["scenario"], run["admission"], run["init_ratio"]), []).append(run)
    rows = []
    for (scenario, admission, init), group in groups.items():
        row = {"scenario": scenario, "admission": admission, "init_ratio": init, "repeats": len(group)}
        for key in MEDIAN_KEYS:
            values = [r[key] for r in group if r[key] is not None]
            row[key] = round(statistics.median(values), 2) if values else None
        rows.append(row)
    return rows


class Probe:
    def __init__(self, model: Path, device: str, dtype: str, engine_args: dict, max_extend_tokens: int,
                 max_tokens: int) -> None:
        self.model, self.device, self.dtype = model, torch.device(device), dtype
        self.engine_args, self.max_extend_tokens, self.max_tokens = engine_args, max_extend_tokens, max_tokens

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, workload: list[tuple[list[int], int]], admission: str, init_ratio: float | None = None) -> dict:
        ratio = NewTokenRatio(init_ratio) if init_ratio is not None else None
        llm = LLM(self.model, max_extend_tokens=self.max_extend_tokens, admission=admission, new_token_ratio=ratio,
                  dtype=self.dtype, device=self.device.type, **self.engine_args)
        llm.generate([workload[0][0][:8]], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up, untimed
        sched = llm.scheduler
        params = SamplingParams(max_tokens=self.max_tokens, ignore_eos=True)
        uids = [(1 << 40) + i for i in range(len(workload))]
        natural = {uid: n for uid, (_, n) in zip(uids, workload)}
        delivered = dict.fromkeys(uids, 0)
        to_stop: list[int] = []
        retracted: set[int] = set()
        stats = {"recomputed_tokens": 0, "max_decode_batch": 0}

        self.sync()
        t0, c0 = time.perf_counter(), time.process_time()
        clock = TokenClock(uids, submit=t0)

        def on_token(req, token: int) -> None:
            if delivered.get(req.uid, -1) < 0 or delivered[req.uid] >= natural[req.uid]:
                return  # a token after the stop (in flight when the stop was seen): the user never gets it
            clock.on_token(req, token)
            delivered[req.uid] += 1
            if delivered[req.uid] == natural[req.uid]:
                to_stop.append(req.uid)

        def on_batch(batch) -> None:
            stats["max_decode_batch"] = max(stats["max_decode_batch"], len(batch.decode_reqs))
            stats["recomputed_tokens"] += sum(r.extend_len for r in batch.prefill_reqs if r.uid in retracted)

        def on_step() -> None:  # between steps, as the scheduler process acts on an abort message
            while to_stop:
                sched.abort_request(to_stop.pop())

        sched.on_token, sched.on_batch = on_token, on_batch
        sched.on_retract = lambda req: retracted.add(req.uid)
        before = sched.admission.num_retractions
        for uid, (ids, _) in zip(uids, workload):
            sched.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32), params))
        sched.run_until_idle(on_step)
        self.sync()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        sched.check_integrity()
        assert all(delivered[u] == natural[u] for u in uids), "a request did not deliver its whole answer"
        for uid in uids:
            sched.take_finished(uid)  # a request whose natural length is max_tokens finishes by itself

        traces = clock.ordered(uids)
        lat = [request_latencies(t) for t in traces]
        ttft = [a for a, _ in lat if a is not None]
        tpot = [b for _, b in lat if b is not None]
        ms = lambda x: None if x is None else round(1000 * x, 2)  # noqa: E731
        tokens = sum(t.tokens for t in traces)
        result = {"admission": admission, "init_ratio": sched.admission.new_token_ratio.init if admission == "optimistic" else None,
                  "output_tokens": tokens, "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 1),
                  "cpu_s": round(cpu, 3),  # this process's CPU time: on a shared CPU, steadier than the wall
                  "ttft_p50_ms": ms(percentile(ttft, 50)), "ttft_p99_ms": ms(percentile(ttft, 99)),
                  "tpot_p50_ms": ms(percentile(tpot, 50)), "retractions": sched.admission.num_retractions - before,
                  "retracted_requests": len(retracted), **stats, "batches": len(sched.history),
                  "kv_slots": sched.cache_manager.num_slots}
        sched.on_token = sched.on_batch = sched.on_retract = None
        del llm, sched
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="JSON file the results are written to")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--cpu", action="store_true", help="SmolLM2-135M on the CPU, CPU-sized workload")
    mode.add_argument("--quick", action="store_true", help="tiny-qwen3 on the CPU, tiny sizes (a smoke run)")
    ap.add_argument("--model", type=Path, default=None, help="default: by mode (GPU: build/bench/qwen3-0.6b-random)")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--min-prompt", type=int, default=None)
    ap.add_argument("--max-prompt", type=int, default=None)
    ap.add_argument("--min-answer", type=int, default=None)
    ap.add_argument("--max-answer", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, default=None, help="every request's max_tokens")
    ap.add_argument("--pool-requests", type=int, default=None,
                    help="KV pool = this many requests at their longest prompt plus max_tokens")
    ap.add_argument("--init-ratios", default="0.7,0.3", help="optimistic runs, one per initial new-token ratio")
    ap.add_argument("--scenarios", default="chat,long", help="chat (short answers), long (answers near max_tokens)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each policy (the median is what to report)")
    args = ap.parse_args(argv)

    if args.quick:
        from tools.models import ensure_model

        model, device, dtype, vocab = ensure_model("tiny-qwen3"), "cpu", "float32", 900
        sizes = dict(requests=16, min_prompt=8, max_prompt=24, min_answer=4, max_answer=16, max_tokens=48,
                     pool_requests=3)
        engine = dict(max_running_reqs=16, max_seq_len=96, page_size=1)
        budget = 256
    elif args.cpu:
        from tools.models import ensure_model

        model, device, dtype, vocab = ensure_model("smollm2"), "cpu", "float32", 40000
        sizes = dict(requests=32, min_prompt=16, max_prompt=48, min_answer=8, max_answer=40, max_tokens=128,
                     pool_requests=4)
        engine = dict(max_running_reqs=32, max_seq_len=256, page_size=1)
        budget = 512
    else:
        from minisgl.benchmark.random_model import make_model
        from minisgl.benchmark.driver import ours_config
        from minisgl.benchmark.workload import nano_vllm_workload

        model, device, dtype, vocab = make_model(args.model or Path("build/bench/qwen3-0.6b-random")), "cuda", \
            "bfloat16", 10000
        sizes = dict(requests=512, min_prompt=64, max_prompt=512, min_answer=16, max_answer=512, max_tokens=2048,
                     pool_requests=32)
        kwargs, overlap = ours_config("ours", torch.device("cuda"), nano_vllm_workload(num_seqs=256))
        engine = dict(kwargs, max_running_reqs=256, max_seq_len=512 + 2048, overlap=overlap)
        engine.pop("device")
        budget = 16384
    if args.model is not None and (args.quick or args.cpu):
        model = args.model
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    page = engine.get("page_size", 1)
    engine["num_pages"] = sizes["pool_requests"] * -(-(sizes["max_prompt"] + sizes["max_tokens"]) // page)
    answers = {"chat": (sizes["min_answer"], sizes["max_answer"]), "long": (sizes["max_tokens"] // 2, sizes["max_tokens"])}
    scenarios = args.scenarios.split(",")
    unknown = set(scenarios) - set(answers)
    if unknown:
        ap.error(f"unknown scenarios {sorted(unknown)} (chat, long)")
    probe = Probe(model, device, dtype, engine, budget, sizes["max_tokens"])
    report = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "model": str(model),
              "command": " ".join(["python -m benchmark.probes.retract_probe", *(argv if argv is not None else sys.argv[1:])]),
              "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "workload": sizes, "engine": {k: v for k, v in engine.items()}, "runs": []}
    configs = [("conservative", None)] + [("optimistic", float(r)) for r in args.init_ratios.split(",")]
    for scenario in scenarios:
        workload = chat_workload(sizes["requests"], (sizes["min_prompt"], sizes["max_prompt"]), answers[scenario], vocab)
        for _ in range(args.repeat):
            for admission, init in configs:
                run = {"scenario": scenario, "answer_tokens": sum(n for _, n in workload),
                       **probe.run(workload, admission, init)}
                report["runs"].append(run)
                print(json.dumps(run), flush=True)
    report["cpu_threads"] = torch.get_num_threads()  # as the engine set it (MINISGL_CPU_THREADS)
    report["medians"] = medians(report["runs"])
    for row in report["medians"]:
        print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
