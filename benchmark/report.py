"""python -m benchmark.report results.json [more.json ...] --png bench.png --md table.md

Reads the records bench.py appended (several files merge: a run split over several processes or
machines), keeps the last record of each system, and writes a markdown table for the book, the targets each
judged met, missed or not judged (and why), the machine each system ran on, and a PNG bar chart of output
tokens/s per system: the median of its timed runs, min to max as an error bar, the number of runs under the
name, with the workload's roofline floor and the throughput targets drawn across.

A throughput target against a peer is judged only between warm measurements (at least one discarded warm-up
run each) from the same `make bench` run (the same session, on the same boot of the same machine): a ratio
to a peer that compiled inside its timed run, or ran on another machine, is not the ratio the target asks for.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmark.machine import describe_state

ORDER = ["ours", "ours-fa", "ours-no-graphs", "ours-no-overlap", "ours-no-fused", "ours-no-splitk", "ours-no-lpt",
         "ours-block-64",
         "ours-triton", "ours-torch", "ours-sampling-api", "nano-vllm", "hf-static", "hf-cb"]
TARGET_X_NANO = 1.5  # output throughput: this many times a warm nano-vllm, the strongest peer that runs here
TARGET_FLOOR_SHARE = 0.8  # ... and this share of the workload's roofline floor (its throughput at the floor)
TARGET_STEP_RATIO = 1.25  # decode step at batch 256 within this factor of its memory floor
TARGET_SMALL_STEP_MS = 1.0  # decode step at batch 8 at most this long
TARGET_X_HF = 20  # output throughput: this many times HF static generate
TARGET_PREFILL_RATIO = 1.5  # a full prefill batch within this factor of its compute floor
TARGET_KERNEL_PCT = 90.0  # the Triton decode kernel at this share of the copy bandwidth or more
MET, MISSED, NOT_JUDGED = "met", "missed", "not judged"


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


def stats(r: dict) -> dict:
    """n, min, median and max of a record's output tok/s; a record of one run (older files) is its own spread."""
    s = (r.get("stats") or {}).get("output_tok_s")
    if s:
        return s
    rate = r["output_tok_s"]
    return {"n": 1, "min": rate, "median": rate, "max": rate}


def is_warm(r: dict | None) -> bool:
    """Measured after at least one discarded warm-up run of the whole workload in the same process."""
    return bool(r) and (r.get("warmup_runs") or 0) >= 1


def same_run(a: dict, b: dict) -> bool:
    """From one `make bench`: the same session, on the same boot of the same machine."""
    ma, mb = a.get("machine") or {}, b.get("machine") or {}
    return (a.get("session") is not None and a.get("session") == b.get("session")
            and ma.get("boot_id") == mb.get("boot_id"))


def _describe(r: dict) -> str:
    c = r.get("config") or {}
    if r["system"].startswith("ours"):
        graphs = c.get("cuda_graph_max_bs")
        graphs = "no graphs" if not graphs else f"graphs up to batch {graphs}"
        fused = ", fused kernels off" if c.get("fused_kernels") == "off" else ""
        fused += ", split-K decode off" if c.get("max_decode_splits") == 1 else ""
        fused += ", decode programs in batch order" if c.get("longest_first") is False else ""
        fused += ", decode key blocks of 64 at every batch size" if "small_batch_block" in c and \
            c["small_batch_block"] is None else ""
        if c.get("sampling"):  # chapter 24's cost row
            fused += ", " + ", ".join(f"{k} {v}" for k, v in c["sampling"].items())
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


def _runs(r: dict) -> str:
    n = stats(r)["n"]
    return f"{n} (+{r['warmup_runs']} warm-up)" if is_warm(r) else f"{n} (no warm-up run)"


def header(records: list[dict]) -> str:
    runs = [r for r in records if r["status"] != "error"] or records
    first = runs[0]
    dates = sorted({r["date"][:10] for r in runs})
    v = first["versions"]
    soft = ", ".join(f"{k} {v[k]}" for k in ("torch", "transformers", "triton", "flash-attn") if v.get(k))
    driver = ((first.get("machine") or {}).get("gpu") or {}).get("driver_version")
    w = first["workload"]
    text = (f"Measured {' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)} on {first['gpu']}"
            f"{f' (driver {driver})' if driver else ''}{', CUDA ' + first['cuda'] if first.get('cuda') else ''}; "
            f"{soft}; python {v['python']}. "
            f"Workload: {w['requests']} requests, {w['prompt_tokens']:,} prompt and {w['output_tokens']:,} output "
            f"tokens, {first['dtype']}.")
    f = headline_floor(runs)
    if f:
        text += (f" Roofline floor of the workload (ideal schedule, copy bandwidth {_num(f['bandwidth_gbs'])} GB/s, "
                 f"{_num(f['peak_tflops'])} TFLOP/s from {f.get('peak_source', '?')}): {f['floor_s']:.3g} s, "
                 f"{f['floor_tok_s']:,.0f} output tok/s.")
    by = latest(runs)
    measured = [by[n] for n in ORDER if n in by and by[n]["status"] in ("ok", "partial")]
    if measured:
        warm = [r["system"] for r in measured if is_warm(r)]
        cold = [r["system"] for r in measured if not is_warm(r)]
        text += (" Measured "
                 + (f"{', '.join(warm)} after a discarded warm-up run of the whole workload in the same process, the "
                    "table showing the median of the timed runs and their min and max" if warm else "")
                 + ("; " if warm and cold else "")
                 + (f"{', '.join(cold)} without a warm-up run (one timed run each: whatever still compiled on "
                    "the way is in it)"
                    if cold else "") + ".")
    return text


def _rate(r: dict | None) -> float | None:
    return r["output_tok_s"] if r and r["status"] == "ok" else None


def table(records: list[dict]) -> str:
    by = latest(records)
    hf_rate, nano_rate = _rate(by.get("hf-static")), _rate(by.get("nano-vllm"))
    rows = ["| system | configuration | runs | output tok/s (median) | min | max | x HF static | x nano-vllm "
            "| mean TTFT (s) | mean TPOT (ms) | wall (s) | x floor |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ORDER:
        r = by.get(name)
        if r is None:
            continue
        if r["status"] in ("skipped", "error"):
            rows.append(f"| {name} | {r['status']}: {r['reason']} |" + " - |" * 10)
            continue
        rate, s = r["output_tok_s"], stats(r)
        rows.append(f"| {name} | {_describe(r)} | {_runs(r)} | {rate:,.0f} | {s['min']:,.0f} | {s['max']:,.0f} | "
                    f"{_f(rate / hf_rate if hf_rate else None, '.1f')} | "
                    f"{_f(rate / nano_rate if nano_rate else None, '.2f')} | "
                    f"{_f(r['mean_ttft_s'], '.2f')} | {_f(r['mean_tpot_s'] and 1000 * r['mean_tpot_s'], '.1f')} | "
                    f"{r['wall_s']:.1f} | {_f(r['floor_ratio'], '.1f')} |")
    return "\n".join(rows)


@dataclass
class Verdict:
    target: str
    measured: str
    state: str  # MET, MISSED or NOT_JUDGED
    why: str = ""  # for NOT_JUDGED: what is missing

    @property
    def cell(self) -> str:
        return f"{self.state}: {self.why}" if self.why else self.state


def _judge(ok: bool) -> str:
    return MET if ok else MISSED


def _peer_ratio(ours: dict | None, peer: dict | None, peer_name: str, target: float, label: str,
                fmt: str = ".2f") -> Verdict:
    """ours / peer against a target, from the medians, with the range over the runs; judged only between warm
    measurements of the same `make bench` run."""
    if not ours or ours["status"] != "ok":
        return Verdict(label, "-", NOT_JUDGED, "no complete run of ours")
    if not peer or peer["status"] != "ok":
        return Verdict(label, "-", NOT_JUDGED, f"no complete run of {peer_name}")
    a, b = stats(ours), stats(peer)
    x = a["median"] / b["median"]
    measured = f"{x:{fmt}}x ({a['median']:,.0f} vs {b['median']:,.0f} tok/s, " + (
        f"medians of {a['n']} and {b['n']} runs; {a['min'] / b['max']:{fmt}}-{a['max'] / b['min']:{fmt}}x from the "
        "slowest to the fastest pairing)" if max(a["n"], b["n"]) > 1 else "one run each)")
    cold = [n for n, r in (("ours", ours), (peer_name, peer)) if not is_warm(r)]
    if cold:
        return Verdict(label, measured, NOT_JUDGED, f"{' and '.join(cold)} measured without a warm-up run")
    if not same_run(ours, peer):
        return Verdict(label, measured, NOT_JUDGED, f"ours and {peer_name} come from different `make bench` runs "
                                                    "(session or machine)")
    return Verdict(label, measured, _judge(x >= target))


def verdicts(records: list[dict]) -> list[Verdict]:
    """Every target the records can say something about, in the order of the chapter's list."""
    by = latest(records)
    ours, nano, hf, micro = by.get("ours"), by.get("nano-vllm"), by.get("hf-static"), by.get("micro")
    out = []
    if ours or nano:
        out.append(_peer_ratio(ours, nano, "nano-vllm", TARGET_X_NANO,
                               f"output throughput >= {TARGET_X_NANO:g}x warm nano-vllm, same `make bench` run"))
    floor = headline_floor([r for r in records if r["status"] != "error"])
    if ours and ours["status"] == "ok" and floor:
        share = ours["output_tok_s"] / floor["floor_tok_s"]
        label = f"output throughput >= {TARGET_FLOOR_SHARE:g} of the workload's floor"
        measured = (f"{share:.2f} ({ours['output_tok_s']:,.0f} vs {floor['floor_tok_s']:,.0f} tok/s at the floor, "
                    f"copy bandwidth {_num(floor['bandwidth_gbs'])} GB/s)")
        out.append(Verdict(label, measured, _judge(share >= TARGET_FLOOR_SHARE)) if is_warm(ours) else
                   Verdict(label, measured, NOT_JUDGED, "ours measured without a warm-up run"))
    if micro and micro["status"] == "ok":
        s = micro["decode_step"]
        out.append(Verdict(f"decode step at batch {s['batch']} <= {TARGET_STEP_RATIO:g}x its memory floor",
                           f"{s['ms_per_step']:.2f} ms vs {s['floor_ms']:.2f} ms ({s['ratio']:.2f}x; mean context "
                           f"{s['mean_context']:.0f}, {_backend(s['attention_backend'])})",
                           _judge(s["ratio"] <= TARGET_STEP_RATIO)))
        if "small_decode_step" in micro:
            t = micro["small_decode_step"]
            out.append(Verdict(f"decode step at batch {t['batch']} <= {TARGET_SMALL_STEP_MS:g} ms",
                               f"{t['ms_per_step']:.2f} ms (memory floor {t['floor_ms']:.2f} ms)",
                               _judge(t["ms_per_step"] <= TARGET_SMALL_STEP_MS)))
    if ours and hf:
        out.append(_peer_ratio(ours, hf, "hf-static", TARGET_X_HF,
                               f"output throughput >= {TARGET_X_HF}x HF static `generate`, same `make bench` run",
                               ".1f"))
    if micro and micro["status"] == "ok":
        if "prefill_step" in micro:
            p = micro["prefill_step"]
            out.append(Verdict(f"prefill batch of {p['tokens']:,} tokens <= {TARGET_PREFILL_RATIO:g}x its compute "
                               "floor",
                               f"{p['ms_per_batch']:.1f} ms vs {p['floor_ms']:.1f} ms ({p['ratio']:.2f}x; prompts of "
                               f"{p['prompt_len']})", _judge(p["ratio"] <= TARGET_PREFILL_RATIO)))
        k = micro["decode_kernel"]
        if "gbs" in k:
            out.append(Verdict(f"Triton decode kernel >= {TARGET_KERNEL_PCT:g}% of the copy bandwidth",
                               f"{_num(k['gbs'])} of {_num(micro['copy']['gbs'])} GB/s ({k['pct_of_copy']:.0f}%; batch "
                               f"{k['batch']}, mean context {k['mean_context']:.0f})",
                               _judge(k["pct_of_copy"] >= TARGET_KERNEL_PCT)))
    return out


def targets(records: list[dict]) -> str:
    found = verdicts(records)
    if not found:
        return "No target can be judged from these results (they need ours, nano-vllm, hf-static or micro)."
    return "\n".join(["| target | measured | met? |", "|---|---|---|"]
                     + [f"| {v.target} | {v.measured} | {v.cell} |" for v in found])


def machines(records: list[dict]) -> str:
    """The machine each record's process found when it started, and its discarded warm-up run."""
    by = latest(records)
    rows = ["| system | session | machine at the process's start | uptime (h) | GPU memory in use at start (MiB) "
            "| warm-up run (discarded): tok/s, wall (s) |", "|---|---|---|---:|---:|---|"]
    for name in ["micro", *ORDER]:
        r = by.get(name)
        if r is None:
            continue
        m = r.get("machine") or {}
        gpu = m.get("gpu") or {}
        warm = "; ".join(f"{w['output_tok_s']:,.0f}, {w['wall_s']:.2f}" for w in r.get("warmup") or []) or "-"
        uptime = m.get("uptime_s")
        rows.append(f"| {name} | {r.get('session') or '-'} | {describe_state(m or None)} | "
                    f"{_f(uptime and uptime / 3600, '.2f')} | {gpu.get('memory.used', '-')} | {warm} |")
    return "\n".join(rows)


def markdown(records: list[dict]) -> str:
    if not records:
        raise ValueError("no results to report")
    return f"{header(records)}\n\n{table(records)}\n\n{targets(records)}\n\n{machines(records)}\n"


def plot(records: list[dict], path: Path) -> Path:
    """Bars of output tokens/s per system (log scale; the median, min to max as an error bar), the floor and the
    throughput targets as lines."""
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
        s = stats(r)
        ax.bar(i, s["median"], color=color, hatch="//" if r["status"] == "partial" else None,
               edgecolor="white", width=0.7)
        if s["n"] > 1:
            ax.errorbar(i, s["median"], yerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]], color="#333333",
                        capsize=3, lw=1)
        ax.annotate(f"{s['median']:,.0f}", (i, s["max"]), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
    floor = (headline_floor(runs) or {}).get("floor_tok_s")
    if floor:
        ax.axhline(floor, color="#444444", ls="--", lw=1, label=f"roofline floor of the workload: {floor:,.0f} tok/s")
        ax.axhline(TARGET_FLOOR_SHARE * floor, color="#8d99ae", ls=":", lw=1.2,
                   label=f"target: {TARGET_FLOOR_SHARE:g} of the floor = {TARGET_FLOOR_SHARE * floor:,.0f} tok/s")
    hf = by.get("hf-static")
    if hf and hf["status"] == "ok":
        goal = TARGET_X_HF * stats(hf)["median"]
        ax.axhline(goal, color="#f4a259", ls=":", lw=1.5, label=f"target: {TARGET_X_HF}x HF static = {goal:,.0f} tok/s")
    nano = by.get("nano-vllm")
    if nano and nano["status"] == "ok":
        goal = TARGET_X_NANO * stats(nano)["median"]
        warm = "warm " if is_warm(nano) else "cold "
        ax.axhline(goal, color="#7b6d8d", ls="-.", lw=1.2,
                   label=f"target: {TARGET_X_NANO:g}x {warm}nano-vllm = {goal:,.0f} tok/s")
    ax.set_yscale("log")
    names = [f"{r['system']}{' (partial)' if r['status'] == 'partial' else ''}\n{stats(r)['n']} "
             f"run{'s' if stats(r)['n'] > 1 else ''}{'' if is_warm(r) else ', no warm-up'}" for r in runs]
    ax.set_xticks(range(len(runs)), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("output tok/s, log scale (median; bar: min-max)", fontsize=9)
    first = runs[0]
    ax.set_title(f"{first['workload']['requests']} requests, {first['workload']['output_tokens']:,} output tokens "
                 f"on {first['gpu']}", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmark.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path, help="JSON files written by benchmark/bench.py")
    ap.add_argument("--png", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args(argv)
    records = load(args.results)
    text = markdown(records)
    print(text)
    for v in verdicts(records):  # the targets once more, one line each, where a log reader looks last
        print(f"{v.state.upper():<10}  {v.target}: {v.measured}" + (f" ({v.why})" if v.why else ""))
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
