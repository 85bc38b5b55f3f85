"""python -m benchmark.pd: chapter 29's measurement, prefill/decode disaggregation against one server.

    python -m benchmark.pd --model models/smollm2 --runs 3 --out build/bench-pd/results.json

A mixed load: long prompts and short ones alternating, each answered with --max-tokens tokens (greedy, EOS ignored),
arriving as a Poisson process at --rate requests per second, sent as chats (or text completions) and streamed
(chapter 22's client). Each
run starts fresh servers for both setups, in alternating order (run 0: one server first, run 1: the pair first, ...):

- one: one server, all the CPU threads ($MINISGL_CPU_THREADS, default every core), the client talks to it directly;
- pd: a prefill server and a decode server (half the threads each) behind sglang-router in prefill/decode mode
  (chapter 29's launcher): the client talks to the router.

Per run and setup: TTFT and TPOT (p50, p90) over all requests, and the TPOT of the short requests alone (the ones a
long prefill stalls on one server). The table gives min / median / max over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import time
from pathlib import Path

from benchmark.dp import ROUTER_COMMAND
from benchmark.online import WORDS, Client, RequestSpec, arrival_offsets, percentile, request_metrics, run_requests

SERVER_FLAGS = "--max-running-reqs 16 --max-seq-len 1024 --cpu-kv-cache-mb 256"


def mixed_workload(num: int, long_words: int, short_words: int, max_tokens: int, seed: int) -> list[RequestSpec]:
    """Long and short prompts alternating (the first long), random words of the benchmark's vocabulary."""
    rng = random.Random(seed)
    return [RequestSpec(i, " ".join(rng.choice(WORDS) for _ in range(long_words if i % 2 == 0 else short_words)),
                        max_tokens) for i in range(num)]


def measure(url: str, model: str, specs: list[RequestSpec], offsets: list[float], api: str) -> dict:
    records, _ = run_requests(Client(url, api, model), specs, offsets, "pd", quiet=True)
    failed = [r["error"] for r in records if r["error"] is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, the first: {failed[0]}")
    for r in records:
        r |= request_metrics(r)
    ttft = [r["ttft_s"] for r in records]
    tpot = [r["tpot_s"] for r in records if r["tpot_s"] is not None]
    short = [r["tpot_s"] for r in records if r["index"] % 2 == 1 and r["tpot_s"] is not None]
    return {"ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90),
            "tpot_p50_s": percentile(tpot, 50), "tpot_p90_s": percentile(tpot, 90),
            "short_tpot_p50_s": percentile(short, 50), "short_tpot_p90_s": percentile(short, 90),
            "prompt_tokens": sum(r["prompt_tokens"] for r in records),
            "output_tokens": sum(r["output_tokens"] for r in records)}


def run_one(setup: str, model: str, flags: list[str], router: list[str], specs, offsets, api: str) -> dict:
    from minisgl.router.pd import PrefillDecode
    from minisgl.server.local import LocalServer

    if setup == "one":
        with LocalServer(model, *flags, echo=False) as server:
            return measure(server.url, Path(model).name, specs, offsets, api)
    with PrefillDecode(model, router, flags, port=0, echo=False) as pd:
        return measure(pd.url, Path(model).name, specs, offsets, api)


def spread(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return f"{ms[0]:.0f} / {statistics.median(ms):.0f} / {ms[-1]:.0f}"


def table(results: list[dict]) -> str:
    keys = [("ttft_p50_s", "TTFT p50"), ("ttft_p90_s", "TTFT p90"), ("tpot_p50_s", "TPOT p50"),
            ("tpot_p90_s", "TPOT p90"), ("short_tpot_p50_s", "short TPOT p50"), ("short_tpot_p90_s", "short TPOT p90")]
    lines = ["| setup | " + " | ".join(f"{label} (ms)" for _, label in keys) + " |",
             "|---|" + "---:|" * len(keys)]
    for setup in ("one", "pd"):
        rows = [r[setup] for r in results]
        lines.append(f"| {setup} | " + " | ".join(spread([r[k] for r in rows]) for k, _ in keys) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmark.pd", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/smollm2")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--num-requests", type=int, default=16)
    p.add_argument("--long-words", type=int, default=400, help="words of a long prompt")
    p.add_argument("--short-words", type=int, default=12, help="words of a short prompt")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--rate", type=float, default=1.0, help="requests per second (Poisson arrivals)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api", choices=("chat", "completions"), default="chat",
                   help="chat (the prompt a user message) or completions (the prompt as text: a model without a "
                        "chat template, such as the GPU benchmark's random one)")
    p.add_argument("--server-args", default=SERVER_FLAGS, help="flags for every server")
    p.add_argument("--router", default=ROUTER_COMMAND)
    p.add_argument("--out", type=Path, default=Path("build/bench-pd/results.json"))
    p.add_argument("--md", type=Path, default=None)
    a = p.parse_args(argv)
    specs = mixed_workload(a.num_requests, a.long_words, a.short_words, a.max_tokens, a.seed)
    offsets = arrival_offsets(a.num_requests, a.rate, a.seed)
    flags, router = shlex.split(a.server_args), shlex.split(a.router)
    results = []
    for run in range(a.runs):
        order = ("one", "pd") if run % 2 == 0 else ("pd", "one")
        result = {}
        for setup in order:
            t0 = time.monotonic()
            result[setup] = run_one(setup, a.model, flags, router, specs, offsets, a.api)
            m = result[setup]
            print(f"run {run} {setup:3}: TTFT p50 {m['ttft_p50_s'] * 1000:.0f} ms p90 {m['ttft_p90_s'] * 1000:.0f} ms, "
                  f"TPOT p50 {m['tpot_p50_s'] * 1000:.0f} ms p90 {m['tpot_p90_s'] * 1000:.0f} ms, short-prompt TPOT "
                  f"p50 {m['short_tpot_p50_s'] * 1000:.0f} ms ({time.monotonic() - t0:.0f} s with start-up)", flush=True)
        results.append(result)
    md = table(results)
    print("\nmin / median / max over the runs\n" + md)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"args": vars(a) | {"out": str(a.out), "md": str(a.md)}, "cpu_count": os.cpu_count(),
                                 "threads": os.environ.get("MINISGL_CPU_THREADS"), "runs": results}, indent=1))
    if a.md is not None:
        a.md.write_text(md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
