"""GPU probe: output tokens/s of LLM.generate per attention backend, overlap scheduling on and off, CUDA graphs on
and off, on a Qwen3-0.6B-shaped model with random bf16 weights (generated on the GPU, nothing downloaded).

    python -m benchmark.probes.gpu_decode_probe [--batches 1 16 64] [--prompt 128] [--tokens 64]

A maintainers' tool for the book's GPU numbers (chapters 11 and 17), run on the final reference tree;
chapter 22's `make bench` is the full benchmark, and makes the same model.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from minisgl.benchmark.random_model import make_model as make_random_model
from minisgl.core import SamplingParams
from minisgl.llm import LLM


def make_model(path: Path) -> Path:
    make_random_model(path)  # chapter 22's maker (minisgl.benchmark): made once, then reused
    return path


def run(path: Path, backend: str, overlap: bool, batch: int, prompt: int, tokens: int, graphs: bool = False) -> dict:
    page = 256 if backend == "fa" else 1
    llm = LLM(path, device="cuda", dtype="bfloat16", attention_backend=backend, overlap=overlap, page_size=page,
              max_running_reqs=batch, max_seq_len=prompt + tokens + page, memory_ratio=0.5,
              cuda_graph_max_bs=batch if graphs else 0)
    gen = torch.Generator().manual_seed(batch)
    prompts = [torch.randint(0, 151936, (prompt,), generator=gen).tolist() for _ in range(batch)]
    params = SamplingParams(max_tokens=tokens, ignore_eos=True)
    llm.generate(prompts[:1], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up: compile, allocate
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    decode_steps = sum(phase == "decode" for phase, _ in llm.scheduler.history)
    llm.scheduler.check_integrity()
    return {"backend": type(llm.engine.attn_backend).__name__, "overlap": overlap, "graphs": graphs, "batch": batch,
            "output_tokens": sum(len(o["token_ids"]) for o in outputs), "seconds": round(seconds, 3),
            "tok_per_s": round(sum(len(o["token_ids"]) for o in outputs) / seconds, 1),
            "ms_per_step": round(1000 * seconds / max(len(llm.scheduler.history), 1), 2), "decode_steps": decode_steps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--model", type=Path, default=Path("/tmp/qwen3-0.6b-random"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--backends", nargs="+", choices=["torch", "triton", "fa"], default=None)
    args = ap.parse_args()
    path = make_model(args.model)
    backends = args.backends or ["torch", "triton"]
    try:
        import flash_attn  # noqa: F401

        backends += [] if args.backends else ["fa"]
    except ImportError:
        backends = [b for b in backends if b != "fa"]
    rows = []
    for batch in args.batches:
        for backend in backends:
            for overlap, graphs in ((False, False), (True, False), (True, True)):
                row = run(path, backend, overlap, batch, args.prompt, args.tokens, graphs)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'batch':>5} {'backend':>18} {'overlap':>7} {'graphs':>6} {'tok/s':>9} {'ms/step':>8}")
    for r in rows:
        print(f"{r['batch']:>5} {r['backend']:>18} {str(r['overlap']):>7} {str(r['graphs']):>6} {r['tok_per_s']:>9} "
              f"{r['ms_per_step']:>8}")


if __name__ == "__main__":
    main()
