"""GPU probe: the Triton decode attention kernel on batches whose contexts are equal and on batches whose contexts
spread as the benchmark workload's do, by number of split-K slices, with the requests' programs started in batch
order and longest first: does an uneven batch leave SMs idle, and does the order win it back?

    PYTHONPATH=$(python -m tools.course tree 26 --sol):. python -m benchmark.probes.decode_balance_probe --out balance.json

One layer's attention of a Qwen3-0.6B shape (16 query heads, 8 KV heads, head_dim 128, bf16), pages of 256 slots
scattered over the cache; times are medians of CUDA-graph replays. GB/s counts the keys and values read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import numpy as np

from minisgl.kernel.triton.attention import longest_first, paged_decode_attention


def batch_case(batch: int, contexts: list[int], page: int = 256, heads: int = 16, kv_heads: int = 8, dim: int = 128):
    pages = [-(-c // page) for c in contexts]
    slots = sum(pages) * page
    k = torch.randn(slots, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    order = torch.randperm(sum(pages), device="cuda")
    width = max(pages) * page
    table = torch.zeros(batch, width, dtype=torch.int32, device="cuda")
    used = 0
    for row, n in enumerate(pages):
        firsts = order[used:used + n] * page
        table[row, : n * page] = (firsts[:, None] + torch.arange(page, device="cuda")).flatten().int()
        used += n
    q = torch.randn(batch, heads, dim, device="cuda", dtype=torch.bfloat16)
    seq_lens = torch.tensor(contexts, dtype=torch.int32, device="cuda")
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    return q, k, v, table, idx, seq_lens


def time_us(fn, replays: int = 50) -> float:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 64, 128, 256])
    ap.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    rows = []
    for batch in args.batches:
        # The workload's contexts late in a run: prompts of 100-1024 tokens plus 0-1024 generated ones.
        spread = (torch.randint(100, 1025, (batch,), generator=gen) + torch.randint(0, 1025, (batch,), generator=gen))
        mean = int(spread.float().mean())
        for name, contexts in (("equal", [mean] * batch), ("spread", spread.tolist())):
            q, k, v, table, idx, lens = batch_case(batch, contexts)
            kv_bytes = 2 * sum(contexts) * 8 * 128 * 2
            lpt = torch.from_numpy(longest_first(np.array(contexts))).cuda()
            for splits in args.splits:
                for order in ("batch", "longest first"):
                    if name == "equal" and order != "batch":
                        continue  # equal contexts: every order is the same work
                    us = time_us(lambda: paged_decode_attention(q, k, v, table, idx, lens, 128 ** -0.5, splits=splits,
                                                                order=lpt if order != "batch" else None))
                    rows.append({"batch": batch, "contexts": name, "order": order, "mean_context": mean,
                                 "max_context": max(contexts), "splits": splits, "us": us, "gb_s": kv_bytes / us / 1e3})
                    print(f"batch {batch:4d} {name:6s} mean {mean:5d} max {max(contexts):5d} splits {splits:2d} "
                          f"{order:13s}: {us:8.1f} us {kv_bytes / us / 1e3:7.0f} GB/s", flush=True)
            del q, k, v, table
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
