"""GPU probe: would running a decode batch as two halves on two CUDA streams hide the small kernels behind attention?

    PYTHONPATH=$(python -m tools.course tree 26 --sol):. python -m benchmark.probes.overlap_probe --out overlap.json

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

    PYTHONPATH=$(python -m tools.course tree 26 --sol):. \
        python -m benchmark.probes.overlap_probe --variants --batches 8 32 64 128 256
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from minisgl.kernel import torch_ops
from minisgl.kernel.triton.activation import silu_and_mul
from minisgl.kernel.triton.attention import longest_first, paged_decode_attention
from minisgl.kernel.triton.norm import fused_add_rms_norm
from minisgl.kernel.triton.rope import qk_norm_rope
from minisgl.kernel.triton.store import store_kv
from benchmark.probes.decode_balance_probe import batch_case, time_us

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


@dataclass(frozen=True)
class Ops:
    """The small kernels of a decode layer (the GEMMs are torch's): residual add + RMSNorm, q/k norm + RoPE + KV
    store (returns q), SiLU-and-mul, and paged attention."""
    norm: Callable
    rope_store: Callable
    silu: Callable
    attention: Callable


def _triton_rope_store(q, k, v, positions, cos, sin, qn, kn, k_cache, v_cache, out_loc, store=True):
    qk_norm_rope(q, k, positions, cos, sin, qn, kn)  # chapter 19: in place, in one kernel
    if store:
        store_kv(k, v, k_cache, v_cache, out_loc)
    return q


def _torch_rope_store(q, k, v, positions, cos, sin, qn, kn, k_cache, v_cache, out_loc):
    q = torch_ops.apply_rotary_emb(torch_ops.rms_norm(q, qn, 1e-6), cos[positions], sin[positions])
    k = torch_ops.apply_rotary_emb(torch_ops.rms_norm(k, kn, 1e-6), cos[positions], sin[positions])
    k_cache[out_loc] = k
    v_cache[out_loc] = v
    return q


ENGINE = Ops(fused_add_rms_norm, _triton_rope_store, silu_and_mul, paged_decode_attention)


def compiled_ops() -> Ops:
    """The small kernels made by torch.compile from chapter 2's torch ops; GEMMs and attention unchanged."""
    return Ops(torch.compile(torch_ops.fused_add_rms_norm, dynamic=False),
               torch.compile(_torch_rope_store, dynamic=False),
               torch.compile(torch_ops.silu_and_mul, dynamic=False), paged_decode_attention)


def step(half: Half, w: list[dict], cos: torch.Tensor, sin: torch.Tensor, ops: Ops = ENGINE) -> torch.Tensor:
    b = half.batch
    h, r = half.x, torch.zeros_like(half.x)
    for lw in w:
        hn, r = ops.norm(h, r, lw["n1"], 1e-6)
        qkv = hn @ lw["qkv"]
        q = qkv[:, :HEADS * DIM].view(b, HEADS, DIM)
        k = qkv[:, HEADS * DIM:(HEADS + KV_HEADS) * DIM].view(b, KV_HEADS, DIM)
        v = qkv[:, (HEADS + KV_HEADS) * DIM:].view(b, KV_HEADS, DIM)
        q = ops.rope_store(q, k, v, half.positions, cos, sin, lw["qn"], lw["kn"], half.k_cache, half.v_cache,
                           half.out_loc)
        a = ops.attention(q, half.k_cache, half.v_cache, half.table, half.idx, half.lens, DIM ** -0.5,
                          order=half.order)
        hn, r = ops.norm(a.view(b, HEADS * DIM) @ lw["o"], r, lw["n2"], 1e-6)
        h = ops.silu(hn @ lw["gu"]) @ lw["down"]
    return h


def variants(batches: list[int]) -> list[dict]:
    gen = torch.Generator().manual_seed(1)
    w = weights(LAYERS)
    cos, sin = torch.randn(4096, DIM, device="cuda"), torch.randn(4096, DIM, device="cuda")
    options = {"without_kv_store_us": replace(ENGINE, rope_store=partial(_triton_rope_store, store=False)),
               "attention_blocks_of_64_us": replace(ENGINE, attention=partial(paged_decode_attention, block_n=64,
                                                                              num_stages=3)),
               "attention_blocks_of_128_us": replace(ENGINE, attention=partial(paged_decode_attention, block_n=128,
                                                                               num_stages=2))}
    rows = []
    for batch in batches:
        contexts = (torch.randint(100, 1025, (batch,), generator=gen)
                    + torch.randint(0, 1025, (batch,), generator=gen)).tolist()
        whole = Half(contexts)
        row = {"batch": batch, "mean_context": int(np.mean(contexts))}
        for _ in range(2):  # twice, interleaved: the spread between repeats shows the noise
            row.setdefault("engine_us", []).append(time_us(lambda: step(whole, w, cos, sin), 30))
            for name, ops in options.items():
                row.setdefault(name, []).append(time_us(lambda: step(whole, w, cos, sin, ops), 30))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--variants", action="store_true", help="time variants of the step on one stream instead")
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
    compiled = compiled_ops()
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
               "one_stream_us": time_us(lambda: step(whole, w, cos, sin), 30),
               "halves_one_stream_us": time_us(lambda: [step(h, w, cos, sin) for h in halves], 30),
               "halves_two_streams_us": time_us(two_streams, 30),
               "torch_compile_small_ops_us": time_us(lambda: step(whole, w, cos, sin, compiled), 30),
               "attention_only_us": time_us(lambda: [paged_decode_attention(
                   whole.q, whole.k_cache, whole.v_cache, whole.table, whole.idx, whole.lens, DIM ** -0.5,
                   order=whole.order) for _ in range(LAYERS)], 30)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
