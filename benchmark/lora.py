"""python -m benchmark.lora: chapter 31's measurement, what LoRA adapters cost a batch.

    python -m benchmark.lora --model models/smollm2 --runs 3 --out build/bench-lora/results.json
    python -m benchmark.lora --device cuda --model build/bench/qwen3-0.6b-random   # on a GPU (bfloat16, CUDA graphs);
                                                    # that model is made with random weights if the folder is missing

Rows: "off" (the engine without LoRA), then the engine with --enable-lora and 8 adapter slots, its requests using
0 adapters (every row the base model: the LoRA path runs with slot -1 everywhere), 1 adapter (all rows the same
one) and 8 distinct adapters (each row its own). The adapters are random (tools/lora.py), rank --rank on every
projection (q, k, v, o, gate, up, down). Workloads, the same prompts for every row, greedy, EOS ignored: batch 8
(eight requests at once) and throughput (--throughput-reqs requests submitted together, spread over the row's
adapters). Each row builds its engine once, runs every workload once to warm up, then --runs timed runs; cells are
output tokens/s, min / median / max. On a CPU the machine's load during the run is recorded.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
from pathlib import Path

import torch

from benchmark.cpu_load import snapshot
from benchmark.quant import requests, run_workloads  # chapter 30's random prompts and timing loop
from benchmark.runs import measure, spread

ROWS = {"off": None, "0 adapters": 0, "1 adapter": 1, "8 adapters": 8}
WORKLOADS = ("batch8", "throughput")
SLOTS = 8


def measure_row(row: str, a, work, folders: dict[str, str], sync) -> dict:
    from minisgl.llm import LLM

    engine = dict(device=a.device, dtype=a.dtype, max_seq_len=a.prompt_len + a.max_tokens + 8,
                  max_running_reqs=max(64, a.throughput_reqs), overlap=a.device.startswith("cuda"))
    if a.device == "cpu":
        engine["cpu_kv_cache_mb"] = a.kv_mb
    adapters = ROWS[row]
    if adapters is not None:
        engine.update(enable_lora=True, lora_paths=folders, max_loras_per_batch=SLOTS, max_lora_rank=a.rank)
    llm = LLM(a.model, **engine)
    from minisgl.core import SamplingParams

    def params(i: int) -> SamplingParams:  # request i uses adapter a{i mod adapters}, or none
        return SamplingParams(max_tokens=a.max_tokens, ignore_eos=True, lora_name=f"a{i % adapters}" if adapters else None)

    got = measure(lambda: run_workloads(llm, work, params, sync), a.runs, warmup_runs=1,
                  on_run=lambda kind, i, r: print(f"  {row} {kind} {i}: " + ", ".join(
                      f"{w} {r[w]['tok_s']:.1f} tok/s" for w in WORKLOADS), flush=True))
    info = {"row": row, **{f"{w}_tok_s": spread([r[w]["tok_s"] for r in got.timed]) for w in WORKLOADS}}
    del llm
    gc.collect()
    if a.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return info


def markdown(rows: list[dict]) -> str:
    head = ["row", "batch 8 tok/s", "throughput tok/s", "batch 8 vs off"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    off = rows[0]["batch8_tok_s"]["median"]
    for r in rows:
        cells = [r["row"]] + [" / ".join(f"{r[f'{w}_tok_s'][s]:.1f}" for s in ("min", "median", "max"))
                              for w in WORKLOADS]
        cells.append(f"{r['batch8_tok_s']['median'] / off:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("\ncells: output tokens/s, min / median / max over the timed runs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmark.lora", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/smollm2")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default=None, help="default: float32 on a CPU, bfloat16 on a GPU")
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--throughput-reqs", type=int, default=32)
    p.add_argument("--kv-mb", type=int, default=64, help="CPU: the KV pool's memory")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("build/bench-lora/results.json"))
    p.add_argument("--md", type=Path, default=None)
    a = p.parse_args(argv)
    a.dtype = a.dtype or ("float32" if a.device == "cpu" else "bfloat16")
    if a.threads:
        torch.set_num_threads(a.threads)

    from transformers import AutoConfig

    from tools.lora import make_adapter

    if a.device.startswith("cuda") and not (Path(a.model) / "config.json").exists():
        from minisgl.benchmark.random_model import make_model

        print(f"== making a random Qwen3-0.6B-shaped model in {a.model}", flush=True)
        make_model(a.model)
    vocab = AutoConfig.from_pretrained(a.model).vocab_size
    work = {"batch8": requests(8, a.prompt_len, vocab, a.seed),
            "throughput": requests(a.throughput_reqs, a.prompt_len, vocab, a.seed + 1)}
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    load_before = snapshot() if a.device == "cpu" else None
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folders = {f"a{i}": str(make_adapter(a.model, f"{tmp}/a{i}", rank=a.rank, seed=i)) for i in range(SLOTS)}
        for row in a.rows:
            print(f"row {row}", flush=True)
            results.append(measure_row(row, a, work, folders, sync))
    report = markdown(results)
    print(report)
    machine = {"cpu_count": os.cpu_count(), "torch": torch.__version__}
    if a.device == "cpu":
        machine |= {"load_before": load_before, "load_after": snapshot()}
    else:
        machine["gpu"] = torch.cuda.get_device_name()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"args": vars(a) | {"out": str(a.out), "md": str(a.md)}, "machine": machine,
                                 "rows": results}, indent=1))
    if a.md:
        a.md.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
