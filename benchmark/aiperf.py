"""The second client of `make bench-serve`: NVIDIA's AIPerf (https://github.com/ai-dynamo/aiperf), a load
generator kept by people who benchmark servers for a living, sent the very requests our client sends.

Two clients that agree say the numbers are the server's; a server that looks slower through ours than through
AIPerf says our client is the limit. AIPerf replays the request bodies verbatim (its `inputs_json` dataset: token-id
prompts, max_tokens, ignore_eos, streaming), at concurrency N for rate inf and as a Poisson process otherwise, and
counts output tokens from the server's usage field. Its per-request "inter token latency" is our TPOT
((last token - first token) / (tokens - 1)).

`make bench-serve LOADGEN=aiperf` installs it into build/aiperf (a virtual environment of its own: it pins
packages of its own) the first time; AIPERF="..." names another command that runs it.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import time
from pathlib import Path

AIPERF_VERSION = "0.13.0"


def write_inputs(bodies: list[dict], path: Path) -> Path:
    """AIPerf's inputs file: one session per request, its one payload the body our client sends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"data": [{"session_id": f"request-{i}", "payloads": [body]}
                                         for i, body in enumerate(bodies)]}))
    return path


def command(aiperf: str, url: str, model: str, tokenizer: str, inputs: Path, requests: int, rate: float,
            out_dir: Path, api_key: str | None = None, seed: int = 0) -> list[str]:
    load = (["--concurrency", str(requests)] if math.isinf(rate)
            else ["--request-rate", f"{rate:g}", "--arrival-pattern", "poisson"])
    cmd = [*shlex.split(aiperf), "profile", "--model", model, "--url", url, "--endpoint-type", "completions",
           "--streaming", "--input-file", str(inputs), "--custom-dataset-type", "inputs_json",
           "--tokenizer", tokenizer, "--request-count", str(requests), *load, "--use-server-token-count",
           "--random-seed", str(seed), "--artifact-dir", str(out_dir), "--ui", "none"]
    if api_key:
        cmd += ["--api-key", api_key]
    return cmd


def _ms(metric: dict | None, key: str) -> float | None:
    if not metric or metric.get(key) is None:
        return None
    return metric[key] / 1000  # AIPerf reports milliseconds; the benchmark, seconds


def read_export(out_dir: Path) -> dict:
    """The numbers of one AIPerf run, in the shape of our client's summary (seconds, tok/s)."""
    data = json.loads((out_dir / "profile_export_aiperf.json").read_text())

    def dist(name: str) -> dict:
        m = data.get(name)
        return {"mean": _ms(m, "avg"), **{f"p{q}": _ms(m, f"p{q}") for q in (50, 90, 99)}}

    value = lambda name: (data.get(name) or {}).get("avg")  # noqa: E731
    return {"requests": value("request_count"), "errors": len(data.get("error_summary") or []),
            "duration_s": value("benchmark_duration"), "output_tok_s": value("output_token_throughput"),
            "request_throughput": value("request_throughput"), "output_tokens": value("total_output_tokens"),
            "ttft_s": dist("time_to_first_token"), "tpot_s": dist("inter_token_latency"),
            "itl_s": {"mean": None, "p50": None, "p90": None, "p99": None}, "version": data.get("aiperf_version")}


def run(aiperf: str, url: str, model: str, tokenizer: str, bodies: list[dict], rate: float, out_dir: Path,
        api_key: str | None = None, seed: int = 0, timeout: float = 1800) -> dict:
    """One AIPerf run of these request bodies at this rate against the server at url; its summary. Raises
    RuntimeError with the end of AIPerf's output if it fails."""
    inputs = write_inputs(bodies, out_dir / "inputs.json")
    cmd = command(aiperf, url, model, tokenizer, inputs, len(bodies), rate, out_dir, api_key, seed)
    t0 = time.perf_counter()
    # AIPerf's offline mode looks a tokenizer up in the hub's cache by name, even a folder's path: for a folder,
    # leave it off (a hub it cannot reach is then only asked about aliases, and the folder is read).
    offline = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if not (Path(tokenizer).is_dir() and k in offline)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0 or not (out_dir / "profile_export_aiperf.json").exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise RuntimeError(f"aiperf failed (exit code {proc.returncode}): " + " | ".join(tail))
    summary = read_export(out_dir)
    summary["wall_s"] = time.perf_counter() - t0  # AIPerf's own start-up included
    return summary
