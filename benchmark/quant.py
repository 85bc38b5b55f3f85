"""python -m benchmark.quant: chapter 30's measurement, quantized weights and an FP8 KV cache against the model's dtype.

    python -m benchmark.quant --model models/smollm2 --runs 3 --out build/bench-quant/results.json
    python -m benchmark.quant --device cuda --model PATH      # on a GPU: bf16, int8wo, fp8, fp8 KV, fp8 + fp8 KV

Rows (--rows): "base" (float32 on a CPU, bfloat16 on a GPU), "int8wo", "fp8", "fp8-tensor", "fp8-kv" and
"fp8+fp8-kv". The default rows are the ones the device runs for real: on a CPU base, int8wo, fp8-kv and
int8wo+fp8-kv (FP8 weights are emulated there by dequantizing: correct, never faster); on a GPU base, int8wo,
fp8, fp8-kv and fp8+fp8-kv.

Workloads, the same requests for every row, greedy, EOS ignored: batch 1 (one request at a time), batch 8 (eight
at once) and throughput (--throughput-reqs requests submitted together). Per row: output tokens/s of each workload,
the decoder's linear-layer weight bytes, and the KV pool's pages: with --kv-mb on a CPU (the same memory for every
row), from free memory on a GPU (so smaller weights give more pages too). Each row builds its engine once, runs
every workload once to warm up, then --runs timed runs; the table gives min / median / max. The first row's answers
are reported beside each row's (how many requests answered the same tokens): quantization changes some tokens.
On a CPU the machine's load during the run is recorded (a shared machine's numbers say so).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import time
from pathlib import Path

import torch

from benchmark.cpu_load import snapshot
from benchmark.runs import measure, spread

ROWS = {"base": {}, "int8wo": dict(quantization="int8wo"), "fp8": dict(quantization="fp8"),
        "fp8-tensor": dict(quantization="fp8-tensor"), "fp8-kv": dict(kv_cache_dtype="fp8_e4m3"),
        "int8wo+fp8-kv": dict(quantization="int8wo", kv_cache_dtype="fp8_e4m3"),
        "fp8+fp8-kv": dict(quantization="fp8", kv_cache_dtype="fp8_e4m3")}
DEFAULT_ROWS = {"cpu": ["base", "int8wo", "fp8-kv", "int8wo+fp8-kv"],
                "cuda": ["base", "int8wo", "fp8", "fp8-kv", "fp8+fp8-kv"]}
WORKLOADS = ("batch1", "batch8", "throughput")


def requests(num: int, prompt_len: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab) for _ in range(prompt_len)] for _ in range(num)]


def linear_weight_bytes(llm) -> int:
    """Bytes of the decoder's linear layers (weights and scales): what weight quantization shrinks."""
    return sum(t.numel() * t.element_size() for name, t in llm.engine.model.state_dict().items()
               if ".layers." in name and "_proj." in name)


def run_workloads(llm, work: dict[str, list[list[int]]], params, sync) -> dict:
    """Every workload once, timed: batch1 one prompt at a time, batch8 eight at a time, the rest all at once.
    params(i) is prompt i's SamplingParams (benchmark/lora.py gives each its adapter)."""
    out = {}
    for name, prompts in work.items():
        step = {"batch1": 1, "batch8": 8}.get(name, len(prompts))
        tokens, answers = 0, []
        sync()
        t0 = time.perf_counter()
        for i in range(0, len(prompts), step):
            batch = range(i, min(i + step, len(prompts)))
            for o in llm.generate([prompts[j] for j in batch], [params(j) for j in batch]):
                tokens += len(o["token_ids"])
                answers.append(o["token_ids"])
        sync()
        out[name] = {"tok_s": tokens / (time.perf_counter() - t0), "answers": answers}
    return out


def measure_row(row: str, a, work, sync) -> dict:
    from minisgl.llm import LLM

    engine = dict(device=a.device, dtype=a.dtype, max_seq_len=a.prompt_len + a.max_tokens + 8,
                  max_running_reqs=max(256, a.throughput_reqs), overlap=a.device == "cuda")  # rows: no cap on pages
    if a.device == "cpu":
        engine["cpu_kv_cache_mb"] = a.kv_mb
    llm = LLM(a.model, **engine, **ROWS[row])
    info = {"row": row, "linear_weight_mb": linear_weight_bytes(llm) / 2**20, "kv_pages": llm.engine.num_pages,
            "kv_bytes_per_token": llm.engine.kv_bytes_per_token,
            "kv_tokens_per_gb": 2**30 // llm.engine.kv_bytes_per_token}  # at equal memory, whatever else the row used
    from minisgl.core import SamplingParams

    params = SamplingParams(max_tokens=a.max_tokens, ignore_eos=True)
    got = measure(lambda: run_workloads(llm, work, lambda i: params, sync), a.runs, warmup_runs=1,
                  on_run=lambda kind, i, r: print(f"  {row} {kind} {i}: " + ", ".join(
                      f"{w} {r[w]['tok_s']:.1f} tok/s" for w in WORKLOADS), flush=True))
    for w in WORKLOADS:
        info[f"{w}_tok_s"] = spread([r[w]["tok_s"] for r in got.timed])
    info["answers"] = {w: got.timed[0][w]["answers"] for w in WORKLOADS}
    del llm
    gc.collect()
    if a.device == "cuda":
        torch.cuda.empty_cache()
    return info


def markdown(rows: list[dict], device: str) -> str:
    head = ["row", "batch 1 tok/s", "batch 8 tok/s", "throughput tok/s", "linear weights MB", "KV pages",
            "KV tokens per GB", "same answers as base"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        cells = [r["row"]]
        for w in WORKLOADS:
            m = r[f"{w}_tok_s"]
            cells.append(" / ".join(f"{m[s]:.1f}" for s in ("min", "median", "max")))
        cells += [f"{r['linear_weight_mb']:.1f}", str(r["kv_pages"]), f"{r['kv_tokens_per_gb']:,}", r["same_answers"]]
        lines.append("| " + " | ".join(cells) + " |")
    kv = "the same --kv-mb for every row" if device == "cpu" else "from the memory left after the weights"
    lines.append(f"\ncells: min / median / max over the timed runs; KV pages {kv}")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["row"] for r in rows]
    fig, axes = plt.subplots(len(WORKLOADS) + 1, 1, figsize=(6, 3 * (len(WORKLOADS) + 1)), constrained_layout=True)
    for ax, w in zip(axes, WORKLOADS):  # one panel per workload, stacked: readable on a phone
        med = [r[f"{w}_tok_s"]["median"] for r in rows]
        err = [[m - r[f"{w}_tok_s"]["min"] for r, m in zip(rows, med)],
               [r[f"{w}_tok_s"]["max"] - m for r, m in zip(rows, med)]]
        ax.bar(names, med, yerr=err, capsize=6, color="#3b75af")
        ax.set_title(f"{w}: output tokens/s (higher is better)", fontsize=12)
        ax.tick_params(labelsize=10)
    axes[-1].bar(names, [r["kv_pages"] for r in rows], color="#ef8636")
    axes[-1].set_title("KV pages", fontsize=12)
    axes[-1].tick_params(labelsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmark.quant", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/smollm2")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default=None, help="default: float32 on a CPU, bfloat16 on a GPU")
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=None)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--throughput-reqs", type=int, default=16)
    p.add_argument("--kv-mb", type=int, default=64, help="CPU: the KV pool's memory, the same for every row")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("build/bench-quant/results.json"))
    p.add_argument("--md", type=Path, default=None)
    p.add_argument("--plot", type=Path, default=None, help="a PNG (default: next to --out)")
    a = p.parse_args(argv)
    a.dtype = a.dtype or ("float32" if a.device == "cpu" else "bfloat16")
    if a.threads:
        torch.set_num_threads(a.threads)
    rows = a.rows or DEFAULT_ROWS["cuda" if a.device.startswith("cuda") else "cpu"]

    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(a.model).vocab_size
    work = {"batch1": requests(4, a.prompt_len, vocab, a.seed), "batch8": requests(8, a.prompt_len, vocab, a.seed + 1),
            "throughput": requests(a.throughput_reqs, a.prompt_len, vocab, a.seed + 2)}
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    load_before = snapshot() if a.device == "cpu" else None
    results = []
    for row in rows:
        print(f"row {row}", flush=True)
        results.append(measure_row(row, a, work, sync))
    base = results[0]["answers"]
    for r in results:
        same = sum(x == y for w in WORKLOADS for x, y in zip(r["answers"][w], base[w]))
        r["same_answers"] = f"{same}/{sum(len(base[w]) for w in WORKLOADS)}"
    report = markdown(results, "cpu" if a.device == "cpu" else "cuda")
    print(report)
    machine = {"cpu_count": os.cpu_count(), "torch": torch.__version__}
    if a.device == "cpu":
        machine |= {"load_before": load_before, "load_after": snapshot()}
    else:
        machine["gpu"] = torch.cuda.get_device_name()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"args": vars(a) | {"out": str(a.out), "md": str(a.md), "plot": str(a.plot)},
                                 "machine": machine,
                                 "rows": [{k: v for k, v in r.items() if k != "answers"} for r in results]},
                                indent=1))
    if a.md:
        a.md.write_text(report + "\n")
    plot(results, a.plot or a.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
