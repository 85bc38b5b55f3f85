"""GPU probe: how fast can a kernel read from this GPU's memory, and how close do the Triton decode attention
kernel's launch settings bring it?

    PYTHONPATH=$(python -m tools.course tree 26 --sol):. python -m benchmark.probes.decode_tune_probe --out tune.json

1. Read bandwidth: a Triton kernel that only reads (sums) 4 GiB (the roofline floor uses a copy, which also writes).
2. The decode attention kernel, longest first, over launch settings (keys per block, warps, pipeline stages) and
   numbers of slices, on three draws of contexts spread as the workload's (decode_balance_probe's cases) and on
   equal contexts, per batch size. Times are medians of CUDA-graph replays.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

from minisgl.kernel.triton.attention import longest_first, paged_decode_attention
from benchmark.probes.decode_balance_probe import batch_case, time_us


@triton.jit
def _read_kernel(X, Out, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(ITERS):
        offs = (pid * ITERS + i).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(X + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(Out + pid, tl.sum(acc, 0))


def bandwidth() -> dict:
    x = torch.empty(2 << 30, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    nbytes = x.numel() * 2
    rows = {"graph_captured_copy_gb_s": 2 * nbytes / time_us(lambda: y.copy_(x), 20) / 1e3}
    for block, iters, warps in ((4096, 8, 8), (8192, 8, 8), (4096, 16, 4), (2048, 32, 4)):
        out = torch.empty(triton.cdiv(x.numel(), block * iters), device="cuda")
        us = time_us(lambda: _read_kernel[(out.numel(),)](x, out, x.numel(), BLOCK=block, ITERS=iters,
                                                             num_warps=warps), 20)
        rows[f"read_b{block}_i{iters}_w{warps}_gb_s"] = nbytes / us / 1e3
    print(json.dumps(rows), flush=True)
    return rows


def attention_sweep(batches: list[int], draws: int = 3) -> list[dict]:
    """Every launch setting and number of slices on `draws` batches of spread contexts (and one of equal contexts)
    per batch size; a row per (batch, contexts, setting) with the time summed over the draws."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    settings = list(itertools.product((64, 128), (4, 8), (2, 3, 4)))
    for batch in batches:
        cases = []
        for i in range(draws):
            spread = torch.randint(100, 1025, (batch,), generator=gen) + torch.randint(0, 1025, (batch,), generator=gen)
            cases.append(("spread", spread.tolist()))
        cases.append(("equal", [1000] * batch))
        for name in ("spread", "equal"):
            built = []
            for case_name, contexts in cases:
                if case_name == name:
                    q, k, v, table, idx, lens = batch_case(batch, contexts)
                    lpt = torch.from_numpy(longest_first(np.array(contexts))).cuda()
                    built.append(((q, k, v, table, idx, lens), lpt, 2 * sum(contexts) * 8 * 128 * 2))
            splits_options = [s for s in (1, 2, 4, 8, 16) if batch * 8 * s <= 8 * 132 * 4]
            for (block_n, warps, stages), splits in itertools.product(settings, splits_options):
                total_us, total_bytes = 0.0, 0
                for args, lpt, kv_bytes in built:
                    launch = dict(block_n=block_n, splits=splits, order=lpt, num_warps=warps, num_stages=stages)
                    total_us += time_us(lambda: paged_decode_attention(*args, 128 ** -0.5, **launch), 30)
                    total_bytes += kv_bytes
                rows.append({"batch": batch, "contexts": name, "block_n": block_n, "warps": warps, "stages": stages,
                             "splits": splits, "us": total_us, "gb_s": total_bytes / total_us / 1e3})
            mine = [r for r in rows if r["batch"] == batch and r["contexts"] == name]
            best = sorted(mine, key=lambda r: r["us"])[:4]
            print(f"batch {batch} {name}: " + "; ".join(f"{r['block_n']}/{r['warps']}/{r['stages']} x{r['splits']} "
                                                        f"{r['us']:.1f} us {r['gb_s']:.0f}" for r in best), flush=True)
            del built
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 16, 32, 64, 96, 128, 192, 256])
    ap.add_argument("--skip", nargs="*", default=[], choices=["bandwidth", "attention"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    record = {"gpu": torch.cuda.get_device_name()}
    if "bandwidth" not in args.skip:
        record["bandwidth"] = bandwidth()
    if "attention" not in args.skip:
        record["attention"] = attention_sweep(args.batches)
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
