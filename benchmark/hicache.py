"""python -m benchmark.hicache: chapter 28's measurement, the host KV tier against the radix cache alone.

    python -m benchmark.hicache --model models/smollm2 --runs 3 --out build/bench-hicache/results.json

Multi-turn chat sessions: --sessions sessions in --groups groups, each group sharing one system prompt; every turn
adds a question to the session's history, and the session's next turn carries the whole history with the answer.
A round sends the next turn of every session at once (a session's next turn waits for its answer). The device KV
pool is sized so that the working set (every system prompt and every session's history at its last turn) is
--working-set times the pool, so the radix cache alone keeps losing what the next turn needs. Rows:

- radix: chapter 9's radix cache, nothing under it;
- write_through / write_back: the host tier (chapter 28) with the host pool --hicache-ratio times the device pool.

Per run and row: TTFT of the turns after the first (p50; from the round's start to the token), output tokens per
second over the whole run, the fraction of prompt tokens found cached, and the copies' bandwidth each way (bytes
over the copies' own time), next to a plain copy of the same direction measured in the same process (the link:
memcpy between two host buffers on a CPU, pinned host <-> device on a GPU). One discarded warm-up run, then --runs
timed runs per row in rotating order; the table gives min / median / max. Same requests, greedy, EOS ignored: the
rows' answers must be the same tokens, and the run fails if they are not.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from benchmark.online import WORDS, percentile
from benchmark.runs import spread

ROWS = ("radix", "write_through", "write_back")


def sessions(num: int, groups: int, system_words: int, question_words: int, seed: int) -> list[dict]:
    """Each session: its group's system prompt and one list of questions per turn (filled by --turns later)."""
    rng = random.Random(seed)
    systems = [" ".join(rng.choice(WORDS) for _ in range(system_words)) for _ in range(groups)]
    return [{"system": systems[i % groups], "rng": random.Random(seed * 1000 + i), "words": question_words}
            for i in range(num)]


def question(session: dict) -> str:
    return " ".join(session["rng"].choice(WORDS) for _ in range(session["words"]))


def turn_prompts(tokenizer, specs: list[dict], turns: int) -> list[list[str]]:
    """The questions of every turn of every session (fixed before the runs: every row asks the same)."""
    return [[question(s) for _ in range(turns)] for s in specs]


def encode(tokenizer, system: str, history: list[tuple[str, list[int]]], ask: str) -> list[int]:
    """A session's prompt: system prompt, then each earlier question and its answer's tokens, then the new question.
    Plain token concatenation (not a chat template): a session's next prompt then starts with its last one exactly."""
    ids = tokenizer.encode(system)
    for q, answer in history:
        ids += tokenizer.encode(" " + q) + answer
    return ids + tokenizer.encode(" " + ask)


def working_set(tokenizer, specs, questions, max_tokens: int) -> int:
    """Tokens of every distinct system prompt and every session's history at its last turn (with its answer)."""
    systems = {s["system"] for s in specs}
    total = sum(len(tokenizer.encode(s)) for s in systems)
    for s, qs in zip(specs, questions):
        total += sum(len(tokenizer.encode(" " + q)) + max_tokens for q in qs)
    return total


def run_once(make_llm, tokenizer, specs, questions, max_tokens: int, row: str) -> dict:
    """All rounds on a fresh engine; the metrics of one run and the answers."""
    from minisgl.core import SamplingParams

    llm = make_llm(row)
    sched = llm.scheduler
    first: dict[int, float] = {}
    sched.on_token = lambda req, _: first.setdefault(req.uid, time.perf_counter())
    histories: list[list[tuple[str, list[int]]]] = [[] for _ in specs]
    ttft, answers, generated = [], [], 0
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    start = time.perf_counter()
    for turn in range(len(questions[0])):
        prompts = [encode(tokenizer, s["system"], h, qs[turn]) for s, h, qs in zip(specs, histories, questions)]
        uid0, t0 = llm._next_uid, time.perf_counter()
        outputs = llm.generate(prompts, params)
        for i, out in enumerate(outputs):
            histories[i].append((questions[i][turn], out["token_ids"]))
            answers.append(out["token_ids"])
            generated += len(out["token_ids"])
            if turn > 0:
                ttft.append((first[uid0 + i] - t0) * 1e3)
    seconds = time.perf_counter() - start
    sched.check_integrity()
    pm = sched.prefill_manager
    result = {"row": row, "ttft_p50_ms": percentile(ttft, 50), "output_tok_s": generated / seconds,
              "seconds": seconds, "cached_fraction": pm.cached_tokens / pm.prompt_tokens}
    if sched.hicache is not None:
        bw = sched.hicache.bandwidth()
        status = sched.hicache.status()
        result |= {"h2d_gb_s": bw["h2d"], "d2h_gb_s": bw["d2h"], "loaded_tokens": status["loaded_tokens"],
                   "backed_up_tokens": status["backed_up_tokens"], "host_evicted_tokens": status["host_evicted_tokens"],
                   "h2d_bytes": status["h2d_bytes"], "d2h_bytes": status["d2h_bytes"]}
    return result | {"answers": answers}


def link_reference(device: str, nbytes: int, repeats: int = 5) -> dict[str, float]:
    """GB/s of a plain copy of nbytes each way: host -> host on a CPU; pinned host <-> device on a GPU (the best of
    `repeats`)."""
    n = max(nbytes // 4, 1)
    if device == "cpu":
        a, b = torch.randn(n), torch.empty(n)
        best = min(_timed(lambda: b.copy_(a)) for _ in range(repeats))
        return {"h2d": nbytes / best / 1e9, "d2h": nbytes / best / 1e9}
    host, dev = torch.randn(n).pin_memory(), torch.empty(n, device=device)
    out = {}
    for name, (dst, src) in {"h2d": (dev, host), "d2h": (host, dev)}.items():
        def copy(dst=dst, src=src):
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
        copy()
        out[name] = nbytes / min(_timed(copy) for _ in range(repeats)) / 1e9
    return out


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def summarize(runs: list[dict]) -> dict:
    """min / median / max of every numeric metric, per row."""
    table = {}
    for row in ROWS:
        mine = [r for r in runs if r["row"] == row]
        if not mine:
            continue
        keys = [k for k, v in mine[0].items() if isinstance(v, (int, float)) and k != "row"]
        table[row] = {k: spread([r[k] for r in mine]) for k in keys}
    return table


def markdown(table: dict, link: dict) -> str:
    cols = [("ttft_p50_ms", "TTFT p50, turns 2+ (ms)", "{:.0f}"), ("output_tok_s", "output tok/s", "{:.1f}"),
            ("cached_fraction", "cached fraction", "{:.2f}"), ("h2d_gb_s", "H2D GB/s", "{:.2f}"),
            ("d2h_gb_s", "D2H GB/s", "{:.2f}")]
    lines = ["| row | " + " | ".join(c[1] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for row, metrics in table.items():
        cells = []
        for key, _, fmt in cols:
            m = metrics.get(key)
            cells.append("-" if m is None else " / ".join(fmt.format(m[s]) for s in ("min", "median", "max")))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines.append(f"\nplain copy (the link): H2D {link['h2d']:.2f} GB/s, D2H {link['d2h']:.2f} GB/s; cells: min / "
                 "median / max")
    return "\n".join(lines)


def plot(table: dict, link: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(table)
    fig, axes = plt.subplots(3, 1, figsize=(6, 9), constrained_layout=True)  # tall: readable on a phone
    for ax, key, title in ((axes[0], "ttft_p50_ms", "TTFT p50 of turns 2+ (ms, lower is better)"),
                           (axes[1], "output_tok_s", "output tokens/s (higher is better)")):
        med = [table[r][key]["median"] for r in rows]
        err = [[m - table[r][key]["min"] for r, m in zip(rows, med)], [table[r][key]["max"] - m for r, m in zip(rows, med)]]
        ax.bar(rows, med, yerr=err, capsize=6, color=["#888888", "#3b75af", "#ef8636"][: len(rows)])
        ax.set_title(title, fontsize=13)
        ax.tick_params(labelsize=12)
    ax = axes[2]
    tier = [r for r in rows if "h2d_gb_s" in table[r]]
    x = range(len(tier))
    ax.bar([i - 0.2 for i in x], [table[r]["h2d_gb_s"]["median"] for r in tier], 0.4, label="H2D (load)")
    ax.bar([i + 0.2 for i in x], [table[r]["d2h_gb_s"]["median"] for r in tier], 0.4, label="D2H (write)")
    ax.axhline(link["h2d"], color="k", linestyle="--", label=f"plain copy {link['h2d']:.1f} GB/s")
    ax.set_xticks(list(x), tier)
    ax.set_title("copy bandwidth reached (GB/s)", fontsize=13)
    ax.tick_params(labelsize=12)
    ax.legend(fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmark.hicache", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/smollm2")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default=None, help="default: float32 on a CPU, bfloat16 on a GPU")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--groups", type=int, default=2, help="system prompts, each shared by sessions/groups sessions")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--system-words", type=int, default=60)
    p.add_argument("--question-words", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--working-set", type=float, default=4.0, help="the working set over the device pool's size")
    p.add_argument("--hicache-ratio", type=float, default=4.0, help="host pool over device pool (SGLang's default 2)")
    p.add_argument("--max-running-reqs", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("build/bench-hicache/results.json"))
    p.add_argument("--md", type=Path, default=None)
    p.add_argument("--plot", type=Path, default=None, help="a PNG (default: next to --out)")
    a = p.parse_args(argv)

    from transformers import AutoTokenizer

    from minisgl.llm import LLM

    tokenizer = AutoTokenizer.from_pretrained(a.model)
    specs = sessions(a.sessions, a.groups, a.system_words, a.question_words, a.seed)
    questions = turn_prompts(tokenizer, specs, a.turns)
    total = working_set(tokenizer, specs, questions, a.max_tokens)
    longest = max(len(encode(tokenizer, s["system"], [(q, [0] * a.max_tokens) for q in qs[:-1]], qs[-1])) for s, qs
                  in zip(specs, questions)) + a.max_tokens
    pages = max(int(total / a.working_set) // a.page_size, -(-longest // a.page_size))
    dtype = a.dtype or ("float32" if a.device == "cpu" else "bfloat16")
    engine = dict(device=a.device, dtype=dtype, page_size=a.page_size, num_pages=pages, max_seq_len=longest + 16,
                  max_running_reqs=a.max_running_reqs)

    def make_llm(row: str) -> LLM:
        tier = ({} if row == "radix" else dict(enable_hierarchical_cache=True, hicache_write_policy=row,
                                                 hicache_ratio=a.hicache_ratio))
        return LLM(a.model, **engine, **tier)

    print(f"working set {total} tokens, device pool {pages} pages x {a.page_size} = {pages * a.page_size} tokens "
          f"({total / (pages * a.page_size):.1f}x), longest session {longest} tokens", flush=True)
    runs, answers = [], {}
    order = [ROWS[(i + k) % len(ROWS)] for i in range(a.runs + 1) for k in range(len(ROWS))]
    for n, row in enumerate(tqdm(order, desc="runs")):
        result = run_once(make_llm, tokenizer, specs, questions, a.max_tokens, row)
        got = result.pop("answers")
        if answers.setdefault("tokens", got) != got:
            raise SystemExit(f"row {row} answered differently from the first run: the host tier changed tokens")
        if n >= len(ROWS):  # the first round of rows is the warm-up
            runs.append(result)
    nbytes = max((r.get("h2d_bytes", 0) for r in runs), default=0) or 64 * 2**20
    link = link_reference(a.device, max(nbytes, 64 * 2**20))
    table = summarize(runs)
    report = markdown(table, link)
    print(report)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"args": vars(a) | {"out": str(a.out), "md": str(a.md), "plot": str(a.plot)},
                                 "cpu_count": os.cpu_count(), "device_pool_tokens": pages * a.page_size,
                                 "working_set_tokens": total, "link_gb_s": link, "table": table, "runs": runs},
                                indent=1))
    if a.md:
        a.md.write_text(report + "\n")
    plot(table, link, a.plot or a.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
