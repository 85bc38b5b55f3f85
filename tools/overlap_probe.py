"""GPU probe: would running a decode batch as two halves on two CUDA streams hide the small kernels behind attention?

    PYTHONPATH=$(python -m tools.course tree 26 --sol):. python -m tools.overlap_probe --out overlap.json

A decode step of a Qwen3-0.6B shape (28 layers of residual add + RMSNorm, the QKV GEMM, q/k norm + RoPE, the KV
store, paged attention, the o GEMM, add + RMSNorm, the gate/up GEMM, SiLU-and-mul and the down GEMM; the LM head left
out) built from the engine's kernels, on contexts spread as the workload's are. Timed as one CUDA graph: the whole
batch on one stream, and the batch cut into two halves (the requests are independent) whose layers run on two
streams. The attention of one half reads the KV cache while the GEMMs and small kernels of the other run beside it,
if the GPU can fit them in. A third variant runs the small kernels as torch.compile makes them from the plain torch
ops of chapter 2 (nano-vllm's choice) instead of chapter 19's Triton kernels.

With --variants it times, on one stream, variants of the step instead: without the KV store (an upper bound on what
fusing the store into the q/k norm + RoPE kernel could save), and with the attention kernel reading 64 keys per block
(Triton's default 3 pipeline stages) or 128 keys per block in 2 stages at every batch size.

    PYTHONPATH=$(python -m tools.course tree 26 --sol):. python -m tools.overlap_probe --variants --batches 8 32 64 128 256
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from minisgl.kernel import torch_ops
from minisgl.kernel.triton.activation import silu_and_mul
from minisgl.kernel.triton.attention import longest_first, paged_decode_attention
from minisgl.kernel.triton.norm import fused_add_rms_norm
from minisgl.kernel.triton.rope import qk_norm_rope
from minisgl.kernel.triton.store import store_kv
from tools.decode_balance_probe import batch_case

HIDDEN, HEADS, KV_HEADS, DIM, INTER, LAYERS = 1024, 16, 8, 128, 3072, 28


def weights(layers: int) -> list[dict]:
    dev, bf = "cuda", torch.bfloat16
    return [dict(qkv=torch.randn(HIDDEN, (HEADS + 2 * KV_HEADS) * DIM, device=dev, dtype=bf) * 0.02,
                 o=torch.randn(HEADS * DIM, HIDDEN, device=dev, dtype=bf) * 0.02,
                 gu=torch.randn(HIDDEN, 2 * INTER, device=dev, dtype=bf) * 0.02,
                 down=torch.randn(INTER, HIDDEN, device=dev, dtype=bf) * 0.02,
                 n1=torch.ones(HIDDEN, device=dev, dtype=bf), n2=torch.ones(HIDDEN, device=dev, dtype=bf),
                 qn=torch.ones(DIM, device=dev, dtype=bf), kn=torch.ones(DIM, device=dev, dtype=bf))
            for _ in range(layers)]


class Half:
    """Inputs of the decode step of some requests: their hidden states and attention metadata."""

    def __init__(self, contexts: list[int]):
        self.batch = len(contexts)
        self.q, self.k_cache, self.v_cache, self.table, self.idx, self.lens = batch_case(self.batch, contexts)
        self.positions = self.lens.long() - 1
        self.out_loc = self.table[self.idx.long(), self.positions].long()
        self.order = torch.from_numpy(longest_first(np.array(contexts))).cuda()
        self.x = torch.randn(self.batch, HIDDEN, device="cuda", dtype=torch.bfloat16)


def step(half: Half, w: list[dict], cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    b = half.batch
    h, r = half.x, torch.zeros_like(half.x)
    for lw in w:
        hn, r = fused_add_rms_norm(h, r, lw["n1"], 1e-6)
        qkv = hn @ lw["qkv"]
        q = qkv[:, :HEADS * DIM].view(b, HEADS, DIM)
        k = qkv[:, HEADS * DIM:(HEADS + KV_HEADS) * DIM].view(b, KV_HEADS, DIM)
        v = qkv[:, (HEADS + KV_HEADS) * DIM:].view(b, KV_HEADS, DIM)
        qk_norm_rope(q, k, half.positions, cos, sin, lw["qn"], lw["kn"])
        store_kv(k, v, half.k_cache, half.v_cache, half.out_loc)
        a = paged_decode_attention(q, half.k_cache, half.v_cache, half.table, half.idx, half.lens, DIM ** -0.5,
                                   order=half.order)
        hn, r = fused_add_rms_norm(a.view(b, HEADS * DIM) @ lw["o"], r, lw["n2"], 1e-6)
        h = silu_and_mul(hn @ lw["gu"]) @ lw["down"]
    return h


def _qk_norm_rope_store(q, k, v, positions, cos, sin, qn, kn, k_cache, v_cache, out_loc):
    q = torch_ops.apply_rotary_emb(torch_ops.rms_norm(q, qn, 1e-6), cos[positions], sin[positions])
    k = torch_ops.apply_rotary_emb(torch_ops.rms_norm(k, kn, 1e-6), cos[positions], sin[positions])
    k_cache[out_loc] = k
    v_cache[out_loc] = v
    return q


COMPILED = {}


def step_compiled(half: Half, w: list[dict], cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """step() with the small kernels made by torch.compile from the torch ops (the GEMMs and attention unchanged)."""
    if not COMPILED:
        COMPILED["norm"] = torch.compile(torch_ops.fused_add_rms_norm, dynamic=False)
        COMPILED["rope"] = torch.compile(_qk_norm_rope_store, dynamic=False)
        COMPILED["silu"] = torch.compile(torch_ops.silu_and_mul, dynamic=False)
    norm, rope, silu = COMPILED["norm"], COMPILED["rope"], COMPILED["silu"]
    b = half.batch
    h, r = half.x, torch.zeros_like(half.x)
    for lw in w:
        hn, r = norm(h, r, lw["n1"], 1e-6)
        qkv = hn @ lw["qkv"]
        q = qkv[:, :HEADS * DIM].view(b, HEADS, DIM)
        k = qkv[:, HEADS * DIM:(HEADS + KV_HEADS) * DIM].view(b, KV_HEADS, DIM)
        v = qkv[:, (HEADS + KV_HEADS) * DIM:].view(b, KV_HEADS, DIM)
        q = rope(q, k, v, half.positions, cos, sin, lw["qn"], lw["kn"], half.k_cache, half.v_cache, half.out_loc)
        a = paged_decode_attention(q, half.k_cache, half.v_cache, half.table, half.idx, half.lens, DIM ** -0.5,
                                   order=half.order)
        hn, r = norm(a.view(b, HEADS * DIM) @ lw["o"], r, lw["n2"], 1e-6)
        h = silu(hn @ lw["gu"]) @ lw["down"]
    return h


def graph_us(fn, replays: int = 30) -> float:
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


def variants(batches: list[int]) -> list[dict]:
    global store_kv, paged_decode_attention
    gen = torch.Generator().manual_seed(1)
    w = weights(LAYERS)
    cos, sin = torch.randn(4096, DIM, device="cuda"), torch.randn(4096, DIM, device="cuda")
    store, attention = store_kv, paged_decode_attention
    rows = []
    try:
        for batch in batches:
            contexts = (torch.randint(100, 1025, (batch,), generator=gen)
                        + torch.randint(0, 1025, (batch,), generator=gen)).tolist()
            whole = Half(contexts)
            row = {"batch": batch, "mean_context": int(np.mean(contexts))}
            for _ in range(2):  # twice, interleaved: the spread between repeats shows the noise
                row.setdefault("engine_us", []).append(graph_us(lambda: step(whole, w, cos, sin)))
                store_kv = lambda *args, **kwargs: None  # noqa: E731
                row.setdefault("without_kv_store_us", []).append(graph_us(lambda: step(whole, w, cos, sin)))
                store_kv = store
                for block_n, stages in ((64, 3), (128, 2)):
                    paged_decode_attention = lambda *args, **kwargs: attention(  # noqa: E731
                        *args, block_n=block_n, num_stages=stages, **kwargs)
                    row.setdefault(f"attention_blocks_of_{block_n}_us", []).append(
                        graph_us(lambda: step(whole, w, cos, sin)))
                paged_decode_attention = attention
            rows.append(row)
            print(json.dumps(row), flush=True)
            del whole
    finally:
        store_kv, paged_decode_attention = store, attention
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--variants", action="store_true", help="time the two variants of one step instead")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.variants:
        rows = variants(args.batches)
        if args.out:
            args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "variants": rows}, indent=1) + "\n")
        return
    gen = torch.Generator().manual_seed(0)
    w = weights(LAYERS)
    cos, sin = torch.randn(4096, DIM, device="cuda"), torch.randn(4096, DIM, device="cuda")
    rows = []
    for batch in args.batches:
        contexts = (torch.randint(100, 1025, (batch,), generator=gen) + torch.randint(0, 1025, (batch,), generator=gen))
        contexts = contexts.tolist()
        whole = Half(contexts)
        # Halves of equal KV bytes: alternate the requests sorted by context.
        by_len = sorted(range(batch), key=lambda i: -contexts[i])
        halves = [Half([contexts[i] for i in by_len[0::2]]), Half([contexts[i] for i in by_len[1::2]])]
        side = torch.cuda.Stream()

        def two_streams():
            main = torch.cuda.current_stream()
            side.wait_stream(main)
            step(halves[0], w, cos, sin)
            with torch.cuda.stream(side):
                step(halves[1], w, cos, sin)
            main.wait_stream(side)

        row = {"batch": batch, "mean_context": int(np.mean(contexts)),
               "one_stream_us": graph_us(lambda: step(whole, w, cos, sin)),
               "halves_one_stream_us": graph_us(lambda: [step(h, w, cos, sin) for h in halves]),
               "halves_two_streams_us": graph_us(two_streams),
               "torch_compile_small_ops_us": graph_us(lambda: step_compiled(whole, w, cos, sin)),
               "attention_only_us": graph_us(lambda: [paged_decode_attention(
                   whole.q, whole.k_cache, whole.v_cache, whole.table, whole.idx, whole.lens, DIM ** -0.5,
                   order=whole.order) for _ in range(LAYERS)])}
        rows.append(row)
        print(json.dumps(row), flush=True)
        del whole, halves
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
