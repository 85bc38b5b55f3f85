"""python -m benchmark.dp: chapter 27's measurement, round robin against cache-aware routing (sglang-router).

    python -m benchmark.dp --model models/smollm2 --dp 2 --runs 3 --out build/bench-dp/results.json

For each policy and run: N fresh servers behind sglang-router (minisgl.router.launch, cold prefix caches), the
multi-turn chat workload of minisgl/router/workload.py sent by `--concurrency` clients (each takes a whole
conversation and sends its turns in order, a turn once the last one is answered), greedy, `--max-tokens` each with
EOS ignored. Measured per run: the wall time, requests and prompt tokens per second, and the prefix cache's hit rate
over all workers (the prompt tokens the servers found cached / the prompt tokens they admitted, from each /health),
with each worker's share of the prompt tokens. The table gives min / median / max over the runs.
"""

from __future__ import annotations

import argparse
import json
import queue
import shlex
import statistics
import threading
import time
from pathlib import Path

import httpx

# minisgl is imported where it is used: `make router` reads SGLANG_ROUTER_VERSION with no tree on the path.
SGLANG_ROUTER_VERSION = "0.3.2"  # the router `make router` installs (build/sglang-router)
ROUTER_COMMAND = "build/sglang-router/bin/python -m sglang_router.launch_router"
SERVER_FLAGS = "--max-running-reqs 8 --max-seq-len 1024 --cpu-kv-cache-mb 128"


def send_conversations(url: str, model: str, workload: list[list], concurrency: int, max_tokens: int) -> int:
    """Every conversation, `concurrency` at a time, each turn after the last one's answer. Returns the output
    tokens (from each answer's usage); raises on any error answer."""
    todo: queue.Queue = queue.Queue()
    for conversation in workload:
        todo.put(conversation)
    out, errors, lock = [0], [], threading.Lock()

    def client() -> None:
        with httpx.Client(timeout=600) as http:
            while not errors:
                try:
                    conversation = todo.get_nowait()
                except queue.Empty:
                    return
                for turn in conversation:
                    r = http.post(url + "/v1/completions", json={
                        "model": model, "prompt": turn.prompt, "max_tokens": max_tokens, "temperature": 0,
                        "ignore_eos": True})
                    if r.status_code != 200:
                        errors.append(f"conversation {turn.conversation} turn {turn.turn}: {r.status_code} {r.text}")
                        return
                    with lock:
                        out[0] += r.json()["usage"]["completion_tokens"]

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    return out[0]


def one_run(args: argparse.Namespace, policy: str, workload: list[list]) -> dict:
    from minisgl.router.launch import DataParallel

    model = Path(args.model).name
    with DataParallel(args.model, args.dp, shlex.split(args.router), shlex.split(args.server_args), port=0,
                      policy=policy, echo=False) as dp:
        start = time.perf_counter()
        output_tokens = send_conversations(dp.url, model, workload, args.concurrency, args.max_tokens)
        seconds = time.perf_counter() - start
        health = [httpx.get(u + "/health", timeout=30).json() for u in dp.worker_urls]
    prompt = [h["prompt_tokens"] for h in health]
    cached = [h["cached_tokens"] for h in health]
    requests = sum(len(c) for c in workload)
    return {"policy": policy, "seconds": seconds, "requests": requests, "requests_per_s": requests / seconds,
            "prompt_tokens": sum(prompt), "prompt_tokens_per_s": sum(prompt) / seconds, "output_tokens": output_tokens,
            "cached_tokens": sum(cached), "hit_rate": sum(cached) / max(1, sum(prompt)),
            "worker_prompt_share": [p / max(1, sum(prompt)) for p in prompt]}


def spread(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def table(runs: list[dict]) -> str:
    lines = ["| policy | runs | cache hit rate | requests/s | prompt tokens/s | busiest worker's share |",
             "|---|---|---|---|---|---|"]
    for policy in dict.fromkeys(r["policy"] for r in runs):
        mine = [r for r in runs if r["policy"] == policy]
        lines.append(f"| {policy} | {len(mine)} | {spread([r['hit_rate'] for r in mine], '.1%')} | "
                     f"{spread([r['requests_per_s'] for r in mine], '.2f')} | "
                     f"{spread([r['prompt_tokens_per_s'] for r in mine], '.0f')} | "
                     f"{spread([max(r['worker_prompt_share']) for r in mine], '.0%')} |")
    return "\n".join(lines) + "\n\n(min / median / max over the runs)\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmark.dp", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/smollm2")
    p.add_argument("--dp", type=int, default=2)
    p.add_argument("--policies", default="round_robin,cache_aware")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--conversations", type=int, default=12)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--system-prompts", type=int, default=2)
    p.add_argument("--system-words", type=int, default=80)
    p.add_argument("--answer-words", type=int, default=40, help="words of each (written) assistant answer")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--router", default=ROUTER_COMMAND, help="the command that runs sglang-router")
    p.add_argument("--server-args", default=SERVER_FLAGS, help="flags for every server")
    p.add_argument("--out", default="build/bench-dp/results.json")
    p.add_argument("--md", default=None, help="also write the table here")
    a = p.parse_args(argv)
    from minisgl.router.workload import chat_workload

    workload = chat_workload(a.conversations, a.turns, a.system_prompts, a.system_words, answer_words=a.answer_words,
                             seed=a.seed)
    runs = []
    for run in range(a.runs):  # policies alternate, so that a machine busier at some moment costs both
        for policy in a.policies.split(","):
            result = one_run(a, policy, workload) | {"run": run}
            print(f"{policy} run {run}: {result['seconds']:.1f} s, hit rate {result['hit_rate']:.1%}, "
                  f"{result['requests_per_s']:.2f} requests/s, worker shares "
                  f"{', '.join(f'{s:.0%}' for s in result['worker_prompt_share'])}", flush=True)
            runs.append(result)
    settings = {k: v for k, v in vars(a).items() if k not in ("out", "md")}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": settings, "runs": runs}, indent=1))
    text = table(runs)
    print(text)
    if a.md:
        Path(a.md).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
