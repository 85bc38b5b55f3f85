"""python -m minisgl.benchmark.report results.json [more.json ...] --png bench.png --md table.md

Reads the records bench.py appended (several files merge: a run split over several processes or
machines), keeps the last record of each system, and writes a markdown table for the book and a PNG bar
chart of output tokens/s per system with the workload's roofline floor and the 20x-HF target drawn across.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ORDER = ["ours", "ours-fa", "ours-no-graphs", "ours-no-overlap", "ours-no-fused", "ours-no-splitk", "ours-triton",
         "ours-torch", "nano-vllm", "hf-static", "hf-cb"]
TARGET_X_HF = 20  # output throughput target: this many times HF static generate
TARGET_X_NANO = 1.5  # ... and this many times nano-vllm, the strongest peer that runs here
TARGET_STEP_RATIO = 1.3  # decode step at batch 256 within this factor of its memory floor
TARGET_SMALL_STEP_MS = 1.0  # decode step at batch 8 at most this long
TARGET_PREFILL_RATIO = 1.5  # a full prefill batch within this factor of its compute floor
TARGET_KERNEL_PCT = 90.0  # the Triton decode kernel at this share of the copy bandwidth or more


def load(paths: list[Path]) -> list[dict]:
    records = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, list):
            raise ValueError(f"{path} does not hold a JSON list of results")
        records.extend(data)
    return records


def latest(records: list[dict]) -> dict[str, dict]:
    """The last record of every system (a rerun replaces an earlier one)."""
    out: dict[str, dict] = {}
    for r in records:
        out[r["system"]] = r
    return out


def _backend(cls: str) -> str:
    """FlashAttnBackend -> flash-attn, TritonAttnBackend -> triton, TorchAttnBackend -> torch."""
    name = cls.removesuffix("AttnBackend").lower()
    return {"flash": "flash-attn", "hybrid": "flash-attn prefill + Triton decode"}.get(name, name)


def headline_floor(runs: list[dict]) -> dict | None:
    """The workload floor at the highest copy bandwidth any run measured (every run measures its own, and a
    slower measurement only means a busier moment, so the highest is the strictest floor); each row's
    `x floor` keeps its own run's measurement."""
    floors = [r["floor"] for r in runs if r.get("floor")]
    return max(floors, key=lambda f: f["bandwidth_gbs"]) if floors else None


def _describe(r: dict) -> str:
    c = r.get("config") or {}
    if r["system"].startswith("ours"):
        graphs = c.get("cuda_graph_max_bs")
        graphs = "no graphs" if not graphs else f"graphs up to batch {graphs}"
        fused = ", fused kernels off" if c.get("fused_kernels") == "off" else ""
        fused += ", split-K decode off" if c.get("max_decode_splits") == 1 else ""
        text = (f"{_backend(c.get('attention_backend', '?'))}, pages of {c.get('page_size')}, "
                f"overlap {'on' if c.get('overlap') else 'off'}, {graphs}{fused}")
    elif r["system"] == "nano-vllm":
        commit = (c.get("commit") or "?")[:7]
        text = (f"its checkout at {commit}, its bench settings: CUDA graphs, temperature {c.get('temperature')}, "
                f"blocks of {c.get('kvcache_block_size')}")
    elif r["system"] == "hf-static":
        text = f"`generate`, one batch of {c.get('batch')} left-padded, {c.get('steps')} steps, {c.get('attn')}"
    else:
        text = f"continuous batching ({c.get('attn')})"
    if r["status"] == "partial":
        text += (f"; **partial**: {r['requests_completed']} of {r['workload']['requests']} requests finished, "
                 f"{r['output_tokens']:,} tokens in {r['wall_s']:.0f} s")
    return text


def _f(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _num(x: float) -> str:
    """Thousands for large numbers, three significant digits for small ones (a CPU's TFLOP/s)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def header(records: list[dict]) -> str:
    runs = [r for r in records if r["status"] != "error"] or records
    first = runs[0]
    dates = sorted({r["date"][:10] for r in runs})
    v = first["versions"]
    soft = ", ".join(f"{k} {v[k]}" for k in ("torch", "transformers", "triton", "flash-attn") if v.get(k))
    w = first["workload"]
    text = (f"Measured {' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)} on {first['gpu']}"
            f"{', CUDA ' + first['cuda'] if first.get('cuda') else ''}; {soft}; python {v['python']}. "
            f"Workload: {w['requests']} requests, {w['prompt_tokens']:,} prompt and {w['output_tokens']:,} output "
            f"tokens, {first['dtype']}.")
    f = headline_floor(runs)
    if f:
        text += (f" Roofline floor of the workload (ideal schedule, copy bandwidth {_num(f['bandwidth_gbs'])} GB/s, "
                 f"{_num(f['peak_tflops'])} TFLOP/s from {f.get('peak_source', '?')}): {f['floor_s']:.3g} s, "
                 f"{f['floor_tok_s']:,.0f} output tok/s.")
    return text


def _rate(r: dict | None) -> float | None:
    return r["output_tok_s"] if r and r["status"] == "ok" else None


def table(records: list[dict]) -> str:
    by = latest(records)
    hf_rate, nano_rate = _rate(by.get("hf-static")), _rate(by.get("nano-vllm"))
    rows = ["| system | configuration | output tok/s | x HF static | x nano-vllm | mean TTFT (s) | mean TPOT (ms) "
            "| wall (s) | x floor |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ORDER:
        r = by.get(name)
        if r is None:
            continue
        if r["status"] in ("skipped", "error"):
            rows.append(f"| {name} | {r['status']}: {r['reason']} | - | - | - | - | - | - | - |")
            continue
        rate = r["output_tok_s"]
        rows.append(f"| {name} | {_describe(r)} | {rate:,.0f} | {_f(rate / hf_rate if hf_rate else None, '.1f')} | "
                    f"{_f(rate / nano_rate if nano_rate else None, '.2f')} | "
                    f"{_f(r['mean_ttft_s'], '.2f')} | {_f(r['mean_tpot_s'] and 1000 * r['mean_tpot_s'], '.1f')} | "
                    f"{r['wall_s']:.1f} | {_f(r['floor_ratio'], '.1f')} |")
    return "\n".join(rows)


def targets(records: list[dict]) -> str:
    by = latest(records)
    rows = ["| target | measured | met |", "|---|---|---|"]
    ours, hf = by.get("ours"), by.get("hf-static")
    if ours and hf and ours["status"] == "ok" and hf["status"] == "ok":
        x = ours["output_tok_s"] / hf["output_tok_s"]
        rows.append(f"| output throughput >= {TARGET_X_HF}x HF static `generate` | {x:.1f}x "
                    f"({ours['output_tok_s']:,.0f} vs {hf['output_tok_s']:,.0f} tok/s) | "
                    f"{'yes' if x >= TARGET_X_HF else 'no'} |")
    nano = by.get("nano-vllm")
    if ours and nano and ours["status"] == "ok" and nano["status"] == "ok":
        x = ours["output_tok_s"] / nano["output_tok_s"]
        rows.append(f"| output throughput >= {TARGET_X_NANO:g}x nano-vllm | {x:.2f}x "
                    f"({ours['output_tok_s']:,.0f} vs {nano['output_tok_s']:,.0f} tok/s) | "
                    f"{'yes' if x >= TARGET_X_NANO else 'no'} |")
    micro = by.get("micro")
    if micro and micro["status"] == "ok":
        s = micro["decode_step"]
        rows.append(f"| decode step at batch {s['batch']} <= {TARGET_STEP_RATIO:g}x its memory floor | "
                    f"{s['ms_per_step']:.2f} ms vs {s['floor_ms']:.2f} ms ({s['ratio']:.2f}x; mean context "
                    f"{s['mean_context']:.0f}, {_backend(s['attention_backend'])}) | "
                    f"{'yes' if s['ratio'] <= TARGET_STEP_RATIO else 'no'} |")
        if "small_decode_step" in micro:
            t = micro["small_decode_step"]
            rows.append(f"| decode step at batch {t['batch']} <= {TARGET_SMALL_STEP_MS:g} ms | {t['ms_per_step']:.2f} ms "
                        f"(memory floor {t['floor_ms']:.2f} ms) | "
                        f"{'yes' if t['ms_per_step'] <= TARGET_SMALL_STEP_MS else 'no'} |")
        if "prefill_step" in micro:
            p = micro["prefill_step"]
            rows.append(f"| prefill batch of {p['tokens']:,} tokens <= {TARGET_PREFILL_RATIO:g}x its compute floor | "
                        f"{p['ms_per_batch']:.1f} ms vs {p['floor_ms']:.1f} ms ({p['ratio']:.2f}x; prompts of "
                        f"{p['prompt_len']}) | {'yes' if p['ratio'] <= TARGET_PREFILL_RATIO else 'no'} |")
        k = micro["decode_kernel"]
        if "gbs" in k:
            rows.append(f"| Triton decode kernel >= {TARGET_KERNEL_PCT:g}% of the copy bandwidth | "
                        f"{_num(k['gbs'])} of {_num(micro['copy']['gbs'])} GB/s ({k['pct_of_copy']:.0f}%; batch "
                        f"{k['batch']}, mean context {k['mean_context']:.0f}) | "
                        f"{'yes' if k['pct_of_copy'] >= TARGET_KERNEL_PCT else 'no'} |")
    if len(rows) == 2:
        return "No target can be judged from these results (they need ours, hf-static and micro)."
    return "\n".join(rows)


def markdown(records: list[dict]) -> str:
    if not records:
        raise ValueError("no results to report")
    return f"{header(records)}\n\n{table(records)}\n\n{targets(records)}\n"


def plot(records: list[dict], path: Path) -> Path:
    """Bars of output tokens/s per system (log scale), the floor and the 20x-HF target as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = latest(records)
    runs = [by[n] for n in ORDER if n in by and by[n]["status"] in ("ok", "partial")]
    if not runs:
        raise ValueError("no system with a throughput to plot")
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for i, r in enumerate(runs):
        color = "#5b8e7d" if r["system"].startswith("ours") else "#bc4b51"
        ax.bar(i, r["output_tok_s"], color=color, hatch="//" if r["status"] == "partial" else None,
               edgecolor="white", width=0.7)
        ax.annotate(f"{r['output_tok_s']:,.0f}", (i, r["output_tok_s"]), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
    floor = (headline_floor(runs) or {}).get("floor_tok_s")
    if floor:
        ax.axhline(floor, color="#444444", ls="--", lw=1, label=f"roofline floor of the workload: {floor:,.0f} tok/s")
    hf = by.get("hf-static")
    if hf and hf["status"] == "ok":
        goal = TARGET_X_HF * hf["output_tok_s"]
        ax.axhline(goal, color="#f4a259", ls=":", lw=1.5, label=f"target: {TARGET_X_HF}x HF static = {goal:,.0f} tok/s")
    nano = by.get("nano-vllm")
    if nano and nano["status"] == "ok":
        goal = TARGET_X_NANO * nano["output_tok_s"]
        ax.axhline(goal, color="#7b6d8d", ls="-.", lw=1.2,
                   label=f"target: {TARGET_X_NANO:g}x nano-vllm = {goal:,.0f} tok/s")
    ax.set_yscale("log")
    ax.set_xticks(range(len(runs)), [r["system"] + (" (partial)" if r["status"] == "partial" else "") for r in runs],
                  rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("output tokens/s (log scale)")
    first = runs[0]
    ax.set_title(f"{first['workload']['requests']} requests, {first['workload']['output_tokens']:,} output tokens "
                 f"on {first['gpu']}", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minisgl.benchmark.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path, help="JSON files written by minisgl.benchmark.bench")
    ap.add_argument("--png", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args(argv)
    records = load(args.results)
    text = markdown(records)
    print(text)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text)
    if args.png:
        if any(r["status"] in ("ok", "partial") and r["system"] != "micro" for r in records):
            print(f"plot written: {plot(records, args.png).name}")
        else:  # only the micro-benchmarks ran (make bench SYSTEMS=micro): a table, nothing to draw
            print("no plot: no system measured a throughput")
    return 0


if __name__ == "__main__":
    sys.exit(main())
