"""Probe for chapter 25: what a grammar costs per decode step, with 0, half or all rows of a batch constrained.

    python -m benchmark.probes.grammar_probe --out grammar.json                 # SmolLM2-135M on the CPU
    python -m benchmark.probes.grammar_probe --out grammar.json --device cuda --batch 8 64 256 --overlap \
        --model build/bench/qwen3-0.6b-random                        # chapter 22's model: 151,936 ids

Runs on the final reference tree. A batch of --batch requests decodes --tokens tokens each; the constrained rows
follow a regular expression that cannot be complete before then ([a-z ]{n}, n = max(400, 8 * tokens)), so every
row runs the same number of steps and the only difference is the grammar's work: the mask of every constrained
row filled on the CPU, copied, applied, and the matcher advanced, with overlap waiting for each step's results.
Each setting runs --repeat times after one warm-up run; reported: the median and min/max of the wall time per
decode step (the run's wall time over its decode steps: the one prefill step is the same in every setting), and
for all rows constrained the pieces of the grammar's work timed one by one (parts_us).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from tools.models import model_path_from_env

def regex(tokens: int) -> str:
    return "[a-z ]{%d}" % max(400, 8 * tokens)  # longer than `tokens` tokens of up to 8 characters can write


def one_run(llm: LLM, prompts: list[list[int]], constrained: int, tokens: int) -> float:
    grammar = {"regex": regex(tokens)}
    params = [SamplingParams(max_tokens=tokens, ignore_eos=True, **(grammar if i < constrained else {}))
              for i in range(len(prompts))]
    steps = []
    llm.scheduler.on_batch = lambda b: steps.append(b.phase)
    if llm.engine.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    if llm.engine.device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    llm.scheduler.on_batch = None
    assert all(len(o["token_ids"]) == tokens for o in outs), "every row runs all its tokens"
    return wall / max(1, steps.count("decode"))


def parts(llm: LLM, batch: int, tokens: int, repeat: int = 20) -> dict:
    """Microseconds (median of `repeat`) of each piece of a step's grammar work for `batch` constrained rows:
    a fresh bitmask, every row's fill, the copy to the device, the mask applied to float32 logits, and every
    row's accept."""
    from minisgl.constrained.grammar import GrammarSpec, allocate_bitmask, apply_token_bitmask

    vocab, device = llm.engine.model_config.vocab_size, llm.engine.device
    cache = llm.scheduler.grammar.cache
    matchers = [cache.matcher(GrammarSpec("regex", regex(tokens))) for _ in range(batch)]
    logits = torch.randn(batch, vocab, device=device)
    rows = torch.arange(batch, device=device)
    letters = set("abcdefghijklmnopqrstuvwxyz ")
    texts = [llm.tokenizer.decode([t]) for t in range(min(vocab, 4096))]
    allowed = [t for t, text in enumerate(texts) if text and set(text) <= letters][:64]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {"allocate": [], "fill": [], "copy": [], "apply": [], "accept": []}
    for k in range(repeat):
        t0 = time.perf_counter()
        bitmask = allocate_bitmask(batch, vocab)
        t1 = time.perf_counter()
        for i, m in enumerate(matchers):
            m.fill(bitmask, i)
        t2 = time.perf_counter()
        on_device = bitmask.to(device, non_blocking=True)
        sync()
        t3 = time.perf_counter()
        apply_token_bitmask(logits, on_device, rows)
        sync()
        t4 = time.perf_counter()
        assert all(m.accept(allowed[k % len(allowed)]) for m in matchers), "a token of letters is allowed"
        t5 = time.perf_counter()
        for key, a, b in zip(times, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5)):
            times[key].append(1e6 * (b - a))
    return {key: statistics.median(v) for key, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", type=Path, default=None, help="model folder (default: SmolLM2-135M); a missing "
                    "build/bench/qwen3-0.6b-random is made on the spot, as chapter 22's benchmark does")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--batch", type=int, nargs="+", default=[8])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--overlap", action="store_true", help="overlap scheduling on (it waits while a grammar runs)")
    args = ap.parse_args(argv)
    if args.model is None:
        path = model_path_from_env("smollm2")
    elif args.model.name == "qwen3-0.6b-random":
        from minisgl.benchmark.random_model import make_model

        path = make_model(args.model)
    else:
        path = args.model
    llm = LLM(path, device=args.device, dtype=args.dtype, max_running_reqs=max(8, *args.batch),
              max_seq_len=args.tokens + 128, overlap=args.overlap)
    tok = llm.tokenizer
    text = "Write about the sea."
    prompt = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True,
                                     return_dict=False) if tok.chat_template else tok.encode(text)
    rows = []
    for batch in args.batch:
        prompts = [list(prompt)] * batch
        for constrained in (0, batch // 2, batch):
            one_run(llm, prompts, constrained, args.tokens)  # warm-up: the grammar compiled, the tokenizer loaded
            times = [one_run(llm, prompts, constrained, args.tokens) for _ in range(args.repeat)]
            row = {"constrained_rows": constrained, "batch": batch, "ms_per_step": [1000 * t for t in times],
                   "median_ms": 1000 * statistics.median(times), "min_ms": 1000 * min(times),
                   "max_ms": 1000 * max(times)}
            if constrained == batch:
                row["parts_us"] = parts(llm, batch, args.tokens)
            print(json.dumps(row), flush=True)
            rows.append(row)
    for row in rows:
        base = next(r["median_ms"] for r in rows if r["batch"] == row["batch"] and r["constrained_rows"] == 0)
        row["x_unconstrained"] = row["median_ms"] / base
    args.out.write_text(json.dumps({"device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
                                    "model": str(path), "overlap": args.overlap, "tokens": args.tokens,
                                    "regex": regex(args.tokens), "rows": rows}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
