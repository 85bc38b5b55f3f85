"""python -m benchmark.online: the online benchmark, a client that loads a running server as users would.

    python -m benchmark.online --model models/smollm2 --rates 2,inf --num-requests 16 --out online.json
    python -m benchmark.online --url http://127.0.0.1:8000 --rates 1,4,16 --png online.png

The offline benchmark (benchmark/bench.py) hands every request to the engine at once and measures throughput.
A server is used differently: requests arrive over time, each streams its tokens back over HTTP, and what a user
feels is how long the first token takes and how fast the rest follow. This client sends N requests whose arrival times
form a Poisson process of a given rate (exponential gaps of mean 1/rate; `inf` sends them all at once), streams
each one (server-sent events) and records, per request, when it was sent, when every chunk of text arrived and
when it ended. From those times, for every rate:

    TTFT   time to first token    = first chunk - sent
    ITL    inter-token latency    = the gap between two consecutive chunks (a token whose text is held back,
                                    an incomplete character or a possible stop string, arrives with the next)
    TPOT   time per output token  = (last token - first chunk) / (output tokens - 1), output tokens from usage
    E2E    end-to-end latency     = end of the stream - sent
    throughput                    = completed requests (and their output tokens) / the run's duration
    goodput                       = requests that met the SLOs (TTFT and TPOT within --slo-ttft, --slo-tpot)
                                    / the run's duration

One Python process spends tens of microseconds of CPU on every streamed token; a fast server streams tens of
thousands a second, more than one process can read in time, and a client that falls behind charges its own delay
to the server's TTFT and throughput. --clients N deals the requests out round robin to N processes that share one
start time (each run's CPU per token counts all of them as the client); the streams are read with aiohttp.

With --model it starts `python -m minisgl.server` on a free port of 127.0.0.1 and stops it at the end (no
process is left behind); with --url it uses a server that runs already. Prompts are token ids drawn like the
offline workload's (minisgl/benchmark/workload.py) and sent to /v1/completions; --api chat sends text to
/v1/chat/completions.
Writes every request's times to a JSON file and, with --png, a plot of the percentiles against the rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import aiohttp
import httpx
import psutil

from minisgl.benchmark.workload import nano_vllm_workload
from minisgl.server.local import LocalServer

PERCENTILES = (50, 90, 99)
PLAIN_CHUNK = re.compile(rb'"finish_reason":\s*null')  # an event that carries text only (one choice a request)
WORDS = ("the cache holds keys and values of every token that came before so a new token reads them instead "
         "of computing them again while the scheduler decides which requests run in the next batch").split()


@dataclass
class RequestSpec:
    index: int
    prompt: list[int] | str  # token ids (completions) or text (chat)
    max_tokens: int


# ----------------------------------------------------------------------------------------------- workload
def parse_rates(text: str) -> list[float]:
    """"2,4,inf" -> [2.0, 4.0, inf]: requests per second, inf for all at once."""
    rates = [float(part) for part in text.split(",") if part.strip()]
    if not rates or any(not r > 0 for r in rates):
        raise ValueError(f"--rates needs positive numbers or inf, got {text!r}")
    return rates


def make_requests(api: str, num: int, min_len: int, max_input_len: int, max_output_len: int, max_token_id: int,
                  seed: int) -> list[RequestSpec]:
    """The offline benchmark's kind of workload, smaller: random prompts and output lengths (EOS is ignored).
    For chat, the prompt is that many random words instead of token ids."""
    workload = nano_vllm_workload(num_seqs=num, min_len=min_len, max_input_len=max_input_len,
                                  max_output_len=max_output_len, max_token_id=max_token_id, seed=seed)
    if api == "completions":
        return [RequestSpec(i, ids, n) for i, (ids, n) in enumerate(workload)]
    rng = random.Random(seed)
    return [RequestSpec(i, " ".join(rng.choice(WORDS) for _ in ids), n) for i, (ids, n) in enumerate(workload)]


def arrival_offsets(num: int, rate: float, seed: int) -> list[float]:
    """When each request is sent, in seconds after the start: a Poisson process (the first at 0)."""
    if math.isinf(rate):
        return [0.0] * num
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(num):
        offsets.append(t)
        t += rng.expovariate(rate)
    return offsets


# ----------------------------------------------------------------------------------------------- metrics
def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation between the closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def request_metrics(rec: dict) -> dict:
    """TTFT, TPOT, E2E (seconds; None where undefined) and the inter-token gaps of one finished request."""
    chunks = rec["chunk_s"]
    n = rec["output_tokens"] or 0
    ttft = chunks[0] - rec["start_s"] if chunks else None
    tpot = (rec["finish_s"] - chunks[0]) / (n - 1) if chunks and n >= 2 else None
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": rec["end_s"] - rec["start_s"],
            "itl_s": [b - a for a, b in zip(chunks, chunks[1:])]}


def distribution(values: list[float]) -> dict:
    out = {f"p{q}": percentile(values, q) for q in PERCENTILES}
    out["mean"] = sum(values) / len(values) if values else None
    return out


def summarize_run(records: list[dict], slo_ttft: float | None, slo_tpot: float | None) -> dict:
    """Percentiles, throughput and goodput of one rate's requests (each carrying request_metrics)."""
    done = [r for r in records if r["error"] is None]
    duration = max(r["end_s"] for r in records)  # from the run's start to the last request's end

    def meets(r: dict) -> bool:
        return ((slo_ttft is None or (r["ttft_s"] is not None and r["ttft_s"] <= slo_ttft))
                and (slo_tpot is None or r["tpot_s"] is None or r["tpot_s"] <= slo_tpot))

    good = [r for r in done if meets(r)]
    output = sum(r["output_tokens"] for r in done)
    return {"requests": len(records), "completed": len(done), "failed": len(records) - len(done),
            "duration_s": duration, "output_tokens": output,
            "prompt_tokens": sum(r["prompt_tokens"] for r in done),
            "request_throughput": len(done) / duration, "output_tok_s": output / duration,
            "good_requests": len(good), "goodput": len(good) / duration, "slo_attainment": len(good) / len(records),
            "ttft_s": distribution([r["ttft_s"] for r in done if r["ttft_s"] is not None]),
            "tpot_s": distribution([r["tpot_s"] for r in done if r["tpot_s"] is not None]),
            "itl_s": distribution([gap for r in done for gap in r["itl_s"]]),
            "e2e_s": distribution([r["e2e_s"] for r in done])}


# ----------------------------------------------------------------------------------------------- the client
class Client:
    """Sends the requests of one run and streams their answers."""

    def __init__(self, url: str, api: str, model: str, api_key: str | None = None) -> None:
        self.endpoint = f"{url}/v1/{'chat/completions' if api == 'chat' else 'completions'}"
        self.api, self.model = api, model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def body(self, spec: RequestSpec) -> dict:
        prompt = ({"messages": [{"role": "user", "content": spec.prompt}]} if self.api == "chat"
                  else {"prompt": spec.prompt})
        return {"model": self.model, **prompt, "max_tokens": spec.max_tokens, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}

    async def send(self, http: "aiohttp.ClientSession", spec: RequestSpec, offset: float, t0: float) -> dict:
        """Wait until the request's arrival time, send it, and record when each piece of its answer came."""
        await asyncio.sleep(max(0.0, t0 + offset - time.perf_counter()))
        rec = {"index": spec.index, "scheduled_s": offset, "start_s": time.perf_counter() - t0, "chunk_s": [],
               "finish_s": None, "end_s": None, "input_len": len(spec.prompt) if self.api == "completions" else None,
               "max_tokens": spec.max_tokens, "prompt_tokens": None, "output_tokens": None, "finish_reason": None,
               "error": None}
        try:
            async with http.post(self.endpoint, json=self.body(spec), headers=self.headers) as resp:
                if resp.status != 200:
                    rec["error"] = f"HTTP {resp.status}: {(await resp.read()).decode(errors='replace')[:300]}"
                else:
                    await self._read_events(resp, rec, t0)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            rec["error"] = f"{type(e).__name__}: {e}"
        rec["end_s"] = time.perf_counter() - t0
        if rec["error"] is None and (rec["finish_reason"] is None or rec["output_tokens"] is None):
            rec["error"] = "the stream ended without a finish reason and usage"
        return rec

    @staticmethod
    async def _read_events(resp: "aiohttp.ClientResponse", rec: dict, t0: float) -> None:
        """Read the server-sent events as they come; every event of one read gets the time of that read."""
        buffer = b""
        async for data in resp.content.iter_any():
            now = time.perf_counter() - t0
            *events, buffer = (buffer + data).split(b"\n\n")
            for event in events:
                if Client._take_event(event.strip(), rec, now):
                    return

    @staticmethod
    def _take_event(event: bytes, rec: dict, now: float) -> bool:
        """Record one event; True once the stream is over ([DONE] or an error)."""
        if not event.startswith(b"data: "):
            return False
        data = event[len(b"data: "):]
        if data == b"[DONE]":
            return True
        if PLAIN_CHUNK.search(data) and b'"usage"' not in data and b'"error"' not in data:
            rec["chunk_s"].append(now)  # the common case, a piece of text: no need to parse it (cheap at 10k/s)
            return False
        event = json.loads(data)
        if "error" in event:
            rec["error"] = f"error event: {event['error'].get('message')}"
            return True
        if event.get("usage"):
            rec["prompt_tokens"] = event["usage"]["prompt_tokens"]
            rec["output_tokens"] = event["usage"]["completion_tokens"]
        for choice in event["choices"]:
            if choice.get("finish_reason") is None:
                rec["chunk_s"].append(now)  # a piece of text (the first chunk even when it is empty)
            else:
                rec["finish_s"], rec["finish_reason"] = now, choice["finish_reason"]
        return False

    async def run(self, specs: list[RequestSpec], offsets: list[float], t0: float, on_done) -> list[dict]:
        """Send every request at t0 + its offset (t0 a time.perf_counter() reading) and stream the answers;
        on_done() is called as each request ends."""
        # aiohttp, as AIPerf uses: reading many streams it costs the client a fraction of httpx's CPU per token.
        # No cap on connections: a request that waited for a free connection would charge the client's queue
        # to the server's TTFT.
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=None, connect=30)) as http:

            async def one(spec: RequestSpec, offset: float) -> dict:
                rec = await self.send(http, spec, offset, t0)
                on_done()
                return rec

            return await asyncio.gather(*(one(s, o) for s, o in zip(specs, offsets)))


def run_requests(client: Client, specs: list[RequestSpec], offsets: list[float], label: str, quiet: bool,
                 procs: int = 1) -> tuple[list[dict], float]:
    """One run: the requests sent from `procs` client processes (request i from process i % procs), all timed
    from one start t0. Returns the records in the order of specs and the CPU seconds the other client processes
    spent sending and reading (their start-up excluded)."""
    from tqdm import tqdm

    procs = max(1, min(procs, len(specs)))
    with tqdm(total=len(specs), desc=f"rate {label}", unit="req", disable=quiet, leave=False) as bar:
        if procs == 1:
            return asyncio.run(client.run(specs, offsets, time.perf_counter(), bar.update)), 0.0
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # a fresh interpreter: nothing of this process's event loop or threads
        events, start = ctx.Queue(), ctx.Value("d", 0.0)
        shares = [list(range(k, len(specs), procs)) for k in range(procs)]
        workers = [ctx.Process(target=_client_process, daemon=True,
                               args=(k, client, [specs[i] for i in share], [offsets[i] for i in share], start, events))
                   for k, share in enumerate(shares)]
        for w in workers:
            w.start()
        records: dict[int, list[dict]] = {}
        ready = 0
        try:
            while len(records) < procs:
                try:
                    kind, k, payload = events.get(timeout=1.0)
                except Exception:  # queue.Empty: check that no client process died
                    dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                    if dead:
                        raise RuntimeError(f"a client process died (exit codes {dead})")
                    continue
                if kind == "ready":
                    ready += 1
                    if ready == procs:  # every process has imported what it needs: start the clock now
                        with start.get_lock():
                            start.value = time.perf_counter()
                elif kind == "done":
                    bar.update(payload)
                else:
                    records[k] = payload
        finally:
            for w in workers:
                w.join(timeout=30)
                if w.is_alive():
                    w.kill()
    out: list[dict | None] = [None] * len(specs)
    for k, share in enumerate(shares):
        for i, rec in zip(share, records[k][0]):
            out[i] = rec
    return out, sum(cpu for _, cpu in records.values())  # type: ignore[return-value]


def _client_process(k: int, client: Client, specs: list[RequestSpec], offsets: list[float], start, events) -> None:
    """A client process of run_requests: waits for the common start, then sends its share. perf_counter is the
    system's monotonic clock (Linux, macOS, Windows), so every process measures from the same t0."""
    events.put(("ready", k, None))
    while start.value == 0.0:
        time.sleep(0.001)
    cpu = time.process_time()
    records = asyncio.run(client.run(specs, offsets, start.value, lambda: events.put(("done", k, 1))))
    events.put(("records", k, (records, time.process_time() - cpu)))


# ----------------------------------------------------------------------------------------------- CPU per process
ROLES = {"minisgl-schedul": "scheduler", "minisgl-tokeniz": "tokenizer"}  # the workers' names (chapter 14)


def server_processes(pid: int) -> dict[str, "psutil.Process"]:
    """The processes of the server whose front end has this pid, by role: front end, scheduler, tokenizer (the
    workers name themselves, chapter 14), and this client."""
    import psutil

    front = psutil.Process(pid)
    procs = {"front end": front}
    for child in front.children(recursive=True):
        role = ROLES.get(child.name())
        if role is not None:
            procs[role] = child
    procs["client"] = psutil.Process()
    return procs


def cpu_seconds(procs: dict) -> dict[str, float]:
    """User + system CPU seconds each process has used so far (None for one that is gone)."""
    out = {}
    for role, p in procs.items():
        try:
            t = p.cpu_times()
            out[role] = t.user + t.system
        except Exception:  # psutil.NoSuchProcess: it died, the run's errors say why
            out[role] = None
    return out


def cpu_per_token(before: dict, after: dict, tokens: int) -> dict[str, float | None]:
    """Microseconds of CPU each process spent per output token between two cpu_seconds readings: where the
    served path spends its time (a process near 1e6 / (tok/s) us per token is the one that limits the rate)."""
    return {role: None if before[role] is None or after.get(role) is None or not tokens
            else 1e6 * (after[role] - before[role]) / tokens for role in before}


# ----------------------------------------------------------------------------------------------- the server
def wait_healthy(url: str, timeout: float) -> None:
    """Wait for a server this client did not start."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} was not healthy after {timeout:.0f} s")
        time.sleep(0.5)


@contextmanager
def local_server(model: Path, server_args: list[str], timeout: float, info: dict,
                 profile_dir: Path | None = None) -> Iterator[str]:
    """`python -m minisgl.server` on a free port (chapter 15's LocalServer); yields its URL. On the way out, Ctrl-C
    included, it is stopped with SIGINT and whatever is left is killed; info records its pids, exit code and the
    processes it left behind."""
    print(f"== starting minisgl.server --model {model} {shlex.join(server_args)}", flush=True)
    env = None if profile_dir is None else os.environ | {"MINISGL_PROFILE_DIR": str(profile_dir.resolve())}
    server = LocalServer(model, *server_args, start_timeout=timeout, env=env)
    info.update(pid=server.proc.pid, pids=[server.proc.pid, *(p.pid for p in server.children)],
                command=server.command[1:])
    try:
        yield server.url
    finally:
        info["exit_code"] = server.stop()
        info["left_behind"] = server.left_behind


@contextmanager
def target(args: argparse.Namespace, info: dict) -> Iterator[str]:
    if args.url:
        wait_healthy(args.url.rstrip("/"), 30)
        yield args.url.rstrip("/")
    else:
        with local_server(args.model, shlex.split(args.server_args), args.startup_timeout, info,
                          args.profile_dir) as url:
            yield url


def served_model(url: str, api_key: str | None) -> tuple[str, int]:
    """(model name, max prompt + output tokens) from /v1/models."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    resp = httpx.get(f"{url}/v1/models", headers=headers, timeout=30)
    if resp.status_code != 200:
        raise RuntimeError(f"{url}/v1/models answered {resp.status_code}: {resp.text[:300]}")
    card = resp.json()["data"][0]
    return card["id"], card.get("max_model_len") or 0


# ----------------------------------------------------------------------------------------------- output
def rate_label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def ms(dist: dict, q: str, digits: int = 0) -> str:
    """A percentile (seconds) of a distribution in milliseconds, "-" where it is undefined."""
    return "-" if dist.get(q) is None else f"{1000 * dist[q]:.{digits}f}"


def line(label: str, s: dict) -> str:
    return (f"rate {label:>5}: {s['completed']}/{s['requests']} done in {s['duration_s']:.1f} s, "
            f"{s['request_throughput']:.2f} req/s, {s['output_tok_s']:.1f} tok/s, goodput {s['goodput']:.2f} req/s "
            f"({100 * s['slo_attainment']:.0f}% met the SLOs); ms p50/p90/p99: "
            f"TTFT {ms(s['ttft_s'], 'p50')}/{ms(s['ttft_s'], 'p90')}/{ms(s['ttft_s'], 'p99')}, "
            f"TPOT {ms(s['tpot_s'], 'p50')}/{ms(s['tpot_s'], 'p90')}/{ms(s['tpot_s'], 'p99')}, "
            f"ITL {ms(s['itl_s'], 'p50')}/{ms(s['itl_s'], 'p90')}/{ms(s['itl_s'], 'p99')}")


def cpu_line(per_token: dict) -> str:
    return ", ".join(f"{role} {'-' if us is None else f'{us:.0f} us'}" for role, us in per_token.items())


def plot(result: dict, path: Path) -> Path:
    """TTFT, TPOT and ITL percentiles and the throughput against the request rate (each rate's median run), the
    offline engine's as dashed lines where it ran; two by two, readable on a phone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.get("summary") or summary_rows(result)
    offline = next((r for r in rows if r["rate"] == "offline"), None)
    rows = [r for r in rows if r["rate"] != "offline" and " " not in r["rate"]]  # our client's rates
    x = range(len(rows))
    labels = [r["rate"] for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(8, 6.4))
    axes = axes.ravel()
    for ax, key, title in zip(axes, ("ttft_s", "tpot_s", "itl_s"), ("TTFT", "TPOT", "ITL")):
        for q, style in zip(PERCENTILES, ("-o", "--s", ":^")):
            values = [r[key][f"p{q}"] for r in rows]
            ax.plot(x, [math.nan if v is None else 1000 * v for v in values], style, label=f"p{q}")
        if offline and offline[key]["p50"] is not None:
            ax.axhline(1000 * offline[key]["p50"], color="grey", ls="--", lw=1, label="offline p50")
        ax.set_title(f"{title} (ms)", fontsize=11)
    ax = axes[3]
    ax.plot(x, [r["output_tok_s"] for r in rows], "-o", color="#5b8e7d", label="server")
    if offline:
        ax.axhline(offline["output_tok_s"], color="grey", ls="--", lw=1, label="offline engine")
    ax.set_title("output tokens/s", fontsize=11)
    for ax in axes:
        ax.set_xticks(list(x), labels)
        ax.set_xlabel("request rate (req/s)", fontsize=9)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=9, frameon=False)
    axes[3].legend(fontsize=9, frameon=False, loc="lower right")
    w = result["workload"]
    fig.suptitle(f"{result['model']}: {w['requests']} requests per rate, {w['output_tokens']:,} output tokens, "
                 f"{result['api']} API", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------- the offline row
def run_offline(args: argparse.Namespace, specs: list[RequestSpec]) -> list[dict]:
    """The same requests through LLM (benchmark/offline.py), summarized as a rate "offline" run would be."""
    from benchmark.offline import offline_runs

    print(f"== offline: the same {len(specs)} requests through LLM, 1 untimed run + {args.offline_runs} timed",
          flush=True)
    runs = offline_runs(str(args.model), args.server_args, [(s.prompt, s.max_tokens) for s in specs],
                        args.offline_runs)
    out = []
    for run in runs:
        summary = {"requests": len(specs), "completed": len(specs), "failed": 0, "duration_s": run["wall_s"],
                   "output_tokens": run["output_tokens"], "output_tok_s": run["output_tok_s"],
                   "request_throughput": len(specs) / run["wall_s"],
                   **{k: distribution(run[k]) for k in ("ttft_s", "tpot_s", "itl_s")},
                   "cpu_us_per_token": {"engine": run.get("cpu_us_per_token")}}
        out.append(summary)
        print(f"offline: {summary['output_tok_s']:.1f} tok/s in {run['wall_s']:.1f} s, TPOT p50 "
              f"{1000 * summary['tpot_s']['p50']:.1f} ms", flush=True)
        print(f"  CPU per output token: {cpu_line(summary['cpu_us_per_token'])}", flush=True)
    return out


def run_aiperf(args: argparse.Namespace, url: str, model: str, client: Client, specs: list[RequestSpec]) -> list:
    """AIPerf at every rate, the same request bodies (benchmark/aiperf.py); a failure is recorded, not raised."""
    from benchmark import aiperf

    folder = args.tokenizer or args.model
    tokenizer = str(folder.resolve()) if folder is not None else model  # a path, not a hub name
    out = []
    for rate in args.rates:
        label = rate_label(rate)
        try:
            summary = aiperf.run(args.aiperf, url, model, tokenizer, [client.body(s) for s in specs], rate,
                                 args.out.parent / f"aiperf-{label}", args.api_key, args.seed)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            print(f"aiperf rate {label}: {e}", flush=True)
            out.append({"tool": "aiperf", "rate": label, "error": str(e)})
            continue
        out.append({"tool": "aiperf", "rate": label, "summary": summary})
        print(f"aiperf rate {label:>5}: {summary['output_tok_s']:.1f} tok/s, {summary['errors']} errors; ms p50/p99: "
              f"TTFT {ms(summary['ttft_s'], 'p50')}/{ms(summary['ttft_s'], 'p99')}, "
              f"TPOT {ms(summary['tpot_s'], 'p50')}/{ms(summary['tpot_s'], 'p99')}", flush=True)
    return out


def print_profiles(folder: Path, top: int = 12) -> None:
    """Each process's top functions by own time (tottime), printed and written beside its .prof."""
    import io
    import pstats

    for prof in sorted(folder.glob("*.prof")):
        out = io.StringIO()
        stats = pstats.Stats(str(prof), stream=out)
        stats.sort_stats("tottime").print_stats(top)
        text = out.getvalue()
        prof.with_suffix(".txt").write_text(text)
        body = text[text.find("   ncalls"):] if "   ncalls" in text else text
        print(f"== profile of {prof.stem} ({stats.total_tt:.1f} s profiled)\n{body.rstrip()}", flush=True)


# ----------------------------------------------------------------------------------------------- summary, targets
def median_run(summaries: list[dict]) -> dict:
    """The run of median throughput (the lower middle one of an even count), with min/median/max of the
    throughput over all runs."""
    ordered = sorted(summaries, key=lambda s: s["output_tok_s"])
    rates = [s["output_tok_s"] for s in ordered]
    return {**ordered[(len(ordered) - 1) // 2], "runs": len(ordered),
            "output_tok_s_spread": {"min": rates[0], "median": percentile(rates, 50), "max": rates[-1]}}


def summary_rows(result: dict) -> list[dict]:
    """One row per rate (its median run), and the offline row first when there is one."""
    rows = []
    if result.get("offline"):
        rows.append({"rate": "offline", **median_run(result["offline"])})
    by_rate: dict[str, list[dict]] = {}
    for run in result["runs"]:
        by_rate.setdefault(run["rate"], []).append(run["summary"])
    rows += [{"rate": rate, **median_run(summaries)} for rate, summaries in by_rate.items()]
    rows += [{"rate": f"{ext['tool']} {ext['rate']}", **median_run([ext["summary"]])}
             for ext in result.get("external", []) if "summary" in ext]
    return rows


CPU_COLUMNS = (("engine", "engine"), ("scheduler", "sched"), ("tokenizer", "tok"), ("front end", "front"))


def cpu_cells(r: dict) -> str:
    """The row's CPU microseconds per output token of each process that has them: the offline engine's one process,
    the server's scheduler, tokenizer and front end."""
    per = r.get("cpu_us_per_token") or {}
    return " ".join(f"{short} {per[role]:.0f}" for role, short in CPU_COLUMNS if per.get(role) is not None)


def print_summary(rows: list[dict]) -> None:
    print(f"{'rate':>12} {'runs':>4} {'tok/s min/median/max':>26} {'TTFT p50/p99 ms':>17} {'TPOT p50/p99 ms':>17} "
          f"{'ITL p99 ms':>10}  CPU us per output token")
    for r in rows:
        sp = r["output_tok_s_spread"]
        print(f"{r['rate']:>12} {r['runs']:>4} {sp['min']:>8.0f} /{sp['median']:>7.0f} /{sp['max']:>7.0f} "
              f"{ms(r['ttft_s'], 'p50', 1):>8}/{ms(r['ttft_s'], 'p99', 1):<8} {ms(r['tpot_s'], 'p50', 1):>8}/"
              f"{ms(r['tpot_s'], 'p99', 1):<8} {ms(r['itl_s'], 'p99', 1):>10}  {cpu_cells(r)}")


TTFT_P99_AT_64 = 0.5  # seconds


def targets(rows: list[dict]) -> list[dict]:
    """The served path against the engine: throughput at rate inf >= 0.9x offline, TPOT p50 at rate inf <= 1.3x
    offline, TTFT p99 at rate 64 <= 500 ms; each met or missed (only those whose rows were run)."""
    by = {r["rate"]: r for r in rows}
    out = []

    def add(name: str, ok: bool, detail: str) -> None:
        out.append({"name": name, "verdict": "met" if ok else "missed", "detail": detail})

    off, inf = by.get("offline"), by.get("inf")
    if off and inf:
        ratio = inf["output_tok_s_spread"]["median"] / off["output_tok_s_spread"]["median"]
        add("throughput at rate inf >= 0.9x offline", ratio >= 0.9,
            f"{inf['output_tok_s_spread']['median']:.0f} vs {off['output_tok_s_spread']['median']:.0f} tok/s, "
            f"{ratio:.2f}x")
        a, b = inf["tpot_s"]["p50"], off["tpot_s"]["p50"]
        if a is not None and b:
            add("TPOT p50 at rate inf <= 1.3x offline", a <= 1.3 * b,
                f"{1000 * a:.1f} vs {1000 * b:.1f} ms, {a / b:.2f}x")
    if by.get("64") and by["64"]["ttft_s"]["p99"] is not None:
        p99 = by["64"]["ttft_s"]["p99"]
        add("TTFT p99 at rate 64 <= 500 ms", p99 <= TTFT_P99_AT_64, f"{1000 * p99:.0f} ms")
    return out


# ----------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmark.online", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", type=Path, help="start a server on this model folder (and stop it at the end)")
    where.add_argument("--url", help="use the server running at this URL, e.g. http://127.0.0.1:8000")
    ap.add_argument("--server-args", default="", help='more flags for the server --model starts, e.g. '
                    '"--max-running-reqs 16 --max-seq-len 256"')
    ap.add_argument("--startup-timeout", type=float, default=600)
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--api", choices=["completions", "chat"], default="completions",
                    help="completions: token-id prompts; chat: text prompts through the chat template")
    ap.add_argument("--rates", type=parse_rates, default=parse_rates("4,16,inf"),
                    help="request rates to run, comma-separated requests/s; inf sends all at once (default 4,16,inf)")
    ap.add_argument("--num-requests", type=int, default=128, help="requests per rate (default 128)")
    ap.add_argument("--min-len", type=int, default=100, help="shortest prompt and output (default 100)")
    ap.add_argument("--max-input-len", type=int, default=1024, help="longest prompt (default 1024)")
    ap.add_argument("--max-output-len", type=int, default=512, help="longest output (default 512)")
    ap.add_argument("--max-token-id", type=int, default=None, help="prompt ids are drawn from [0, this] "
                    "(default: 10000, below the model's vocabulary when --model names one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slo-ttft", type=float, default=1.0, help="goodput: TTFT at most this many seconds (1.0)")
    ap.add_argument("--slo-tpot", type=float, default=0.05, help="goodput: TPOT at most this many seconds (0.05)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed requests sent first (default 1)")
    ap.add_argument("--runs", type=int, default=1, help="times each rate is run (default 1); the summary shows "
                    "the median run and the spread of the throughput")
    ap.add_argument("--offline-runs", type=int, default=0, help="with --model: also run the same requests through "
                    "the engine itself (LLM, the server's settings) this many times after one untimed run, before "
                    "the server starts: the offline row the server is measured against (default 0: none)")
    ap.add_argument("--clients", type=int, default=1, help="client processes the requests are dealt out to, "
                    "round robin, sharing one start time (default 1; make bench-serve on a GPU: 4); a fast server "
                    "streams more tokens a second than one Python process can read (see its CPU per token)")
    ap.add_argument("--loadgen", choices=["aiperf"], default=None, help="after our client, run this external load "
                    "generator with the same requests at every rate (benchmark/aiperf.py)")
    ap.add_argument("--aiperf", default="aiperf", help="the command that runs AIPerf (default: aiperf)")
    ap.add_argument("--tokenizer", type=Path, default=None, help="the tokenizer folder AIPerf loads (default: the "
                    "--model folder; needed with --url; the token counts come from the server's usage anyway)")
    ap.add_argument("--profile-dir", type=Path, default=None, help="with --model: every process of the server runs "
                    "under cProfile (slower: not a run to quote) and this folder gets each one's .prof and its top "
                    "functions by own time as text")
    ap.add_argument("--out", type=Path, required=True, help="JSON file the results are written to")
    ap.add_argument("--png", type=Path, default=None, help="plot of the percentiles and throughputs per rate")
    return ap


def check_fits(specs: list[RequestSpec], max_model_len: int) -> None:
    too_long = [s for s in specs if isinstance(s.prompt, list) and len(s.prompt) + s.max_tokens > max_model_len]
    if max_model_len and too_long:
        s = too_long[0]
        raise ValueError(f"request {s.index} needs {len(s.prompt)} + {s.max_tokens} tokens, more than the server's "
                         f"{max_model_len}: lower --max-input-len/--max-output-len or raise the server's --max-seq-len")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.num_requests < 1:
        raise ValueError(f"--num-requests must be >= 1, got {args.num_requests}")
    if args.runs < 1:
        raise ValueError(f"--runs must be >= 1, got {args.runs}")
    if args.clients < 1:
        raise ValueError(f"--clients must be >= 1, got {args.clients}")
    if args.offline_runs < 0:
        raise ValueError(f"--offline-runs must be >= 0, got {args.offline_runs}")
    max_token_id = args.max_token_id
    if max_token_id is None:
        max_token_id = 10000
        if args.model is not None:
            from minisgl.models.config import ModelConfig

            max_token_id = min(max_token_id, ModelConfig.from_path(args.model).vocab_size - 1)
    specs = make_requests(args.api, args.num_requests, args.min_len, args.max_input_len, args.max_output_len,
                          max_token_id, args.seed)
    quiet = bool(os.environ.get("MINISGL_QUIET"))
    # A `kill` stops the run the way Ctrl-C does: through the `finally` that stops the server it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    server: dict = {}
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "api": args.api,
              "server": server, "slo": {"ttft_s": args.slo_ttft, "tpot_s": args.slo_tpot},
              "workload": {"requests": len(specs), "output_tokens": sum(s.max_tokens for s in specs),
                           "min_len": args.min_len, "max_input_len": args.max_input_len,
                           "max_output_len": args.max_output_len, "max_token_id": max_token_id, "seed": args.seed},
              "runs": []}
    if args.offline_runs:
        if args.model is None or args.api != "completions":
            raise ValueError("--offline-runs needs --model and --api completions (token-id prompts)")
        result["offline"] = run_offline(args, specs)
    with target(args, server) as url:
        model, max_model_len = served_model(url, args.api_key)
        result.update(url=url, model=model, max_model_len=max_model_len)
        check_fits(specs, max_model_len)
        client = Client(url, args.api, model, args.api_key)
        warm = [RequestSpec(-1, s.prompt, min(4, s.max_tokens)) for s in specs[: args.warmup]]
        if warm:
            run_requests(client, warm, [0.0] * len(warm), "warm-up", quiet=True)
        procs = server_processes(server["pid"]) if server.get("pid") else {"client": psutil.Process()}
        for i, rate in enumerate(args.rates):
            for repeat in range(args.runs):
                before = cpu_seconds(procs)
                records, client_cpu = run_requests(client, specs, arrival_offsets(len(specs), rate, args.seed + i),
                                                   rate_label(rate), quiet, args.clients)
                for rec in records:
                    if rec["error"] is None:
                        rec.update(request_metrics(rec))
                summary = summarize_run(records, args.slo_ttft, args.slo_tpot)
                after = cpu_seconds(procs)
                after["client"] += client_cpu  # its other processes, if it sent from several
                summary["cpu_us_per_token"] = cpu_per_token(before, after, summary["output_tokens"])
                result["runs"].append({"rate": rate_label(rate), "repeat": repeat, "summary": summary,
                                       "requests": records})
                print(line(rate_label(rate), summary), flush=True)
                print(f"  CPU per output token: {cpu_line(summary['cpu_us_per_token'])}", flush=True)
                for rec in records:
                    if rec["error"] is not None:
                        print(f"  request {rec['index']} failed: {rec['error']}", flush=True)
        if args.loadgen == "aiperf":
            result["external"] = run_aiperf(args, url, model, client, specs)
    result["summary"] = summary_rows(result)
    print_summary(result["summary"])
    result["targets"] = targets(result["summary"])
    for t in result["targets"]:
        print(f"target {t['name']}: {t['verdict']} ({t['detail']})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"results written: {args.out}")
    if args.png:
        print(f"plot written: {plot(result, args.png)}")
    if args.profile_dir is not None:
        print_profiles(args.profile_dir)
    if server.get("left_behind"):
        print("error: the server left processes behind (killed)", file=sys.stderr)
        return 1
    return 1 if any(run["summary"]["failed"] for run in result["runs"]) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the server it started is stopped already
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
