"""Probe for chapter 22: can a Triton GEMM of our own beat cuBLAS on the decode step's few-row matmuls?

    python -m benchmark.probes.gemm_probe --out gemm.json     # on a GPU (CUDA, triton); about two minutes

Runs on the final reference tree. For each GEMM of the benchmark model (micro.model_gemm_shapes: q/k/v, o,
gate/up, down, LM head) and each batch size it times PyTorch's matmul with cuBLAS and with cuBLASLt, and a
sweep of tile shapes (BLOCK_M x BLOCK_N x BLOCK_K, split-K 1-8, pipeline stages) of one plain Triton kernel,
keeping the fastest configuration whose result matches a float32 matmul. Every call reads a cold weight (a
cycle of copies larger than the L2 cache) and the calls are timed as one CUDA graph, as in
micro.gemm_times. Split-K adds its partial sums with atomics into a zeroed float32 output; the time includes
the zeroing (a real split-K would also pay a cast back to bf16, so this flatters it).
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch
import triton
import triton.language as tl

from benchmark.micro import model_gemm_shapes
from minisgl.benchmark.random_model import make_model
from minisgl.models.config import ModelConfig


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, o_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    # out[M, N] (+)= x[M, K] @ w[N, K]^T over this program's slice of K; both operands row-major.
    pid_n, pid_k, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_len = K // SPLIT_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(pid_k * k_len, (pid_k + 1) * k_len, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :], mask=offs_m[:, None] < M, other=0.0)
        w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :], mask=offs_n[:, None] < N, other=0.0)
        acc += tl.dot(x, tl.trans(w))
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    ptrs = o_ptr + offs_m[:, None] * N + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(ptrs, acc.to(o_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(ptrs, acc, mask=mask)


def graph_seconds(calls: list, reps: int = 5) -> float:
    """Mean seconds per call of `calls`, recorded once into a CUDA graph and replayed `reps` times."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000 / reps / len(calls)


def configs(m: int, k: int):
    for bm, bn, bk, split, stages in itertools.product((16, 32, 64, 128), (32, 64, 128, 256), (64, 128),
                                                       (1, 2, 4, 8), (3, 5)):
        if bm <= max(16, triton.next_power_of_2(m)) and k % (split * bk) == 0:
            yield {"bm": bm, "bn": bn, "bk": bk, "split": split, "stages": stages}


def triton_best(x: torch.Tensor, weights: list[torch.Tensor], ref: torch.Tensor) -> tuple[float, dict]:
    m, k = x.shape
    n = weights[0].shape[0]
    best = (float("inf"), {})
    for c in configs(m, k):
        outs = [torch.zeros(m, n, device=x.device, dtype=x.dtype if c["split"] == 1 else torch.float32)
                for _ in weights]
        grid = (triton.cdiv(n, c["bn"]), c["split"], triton.cdiv(m, c["bm"]))

        def call(w, o, c=c, grid=grid):
            if c["split"] > 1:
                o.zero_()
            _gemm_kernel[grid](x, w, o, m, n, k, BLOCK_M=c["bm"], BLOCK_N=c["bn"], BLOCK_K=c["bk"],
                               SPLIT_K=c["split"], num_warps=4, num_stages=c["stages"])

        try:
            seconds = graph_seconds([lambda w=w, o=o: call(w, o) for w, o in zip(weights, outs)], reps=3)
        except Exception:  # noqa: BLE001 - a tile too large for shared memory: not a candidate
            continue
        if (outs[0].float() - ref).abs().max() > 0.02 * ref.abs().max():
            raise AssertionError(f"Triton GEMM config {c} disagrees with the float32 matmul")
        best = min(best, (seconds, c), key=lambda t: t[0])
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/bench/gemm_probe.json")
    ap.add_argument("--rows", default="1,8,32,64,128,256", help="batch sizes, comma-separated")
    ap.add_argument("--cold-bytes", type=int, default=2**28, help="bytes of weight copies cycled per GEMM")
    args = ap.parse_args()
    mc = ModelConfig.from_path(make_model("build/bench/qwen3-0.6b-random"))
    dev, dtype = torch.device("cuda"), torch.bfloat16
    rows = []
    for name, (k, n) in model_gemm_shapes(mc).items():
        copies = max(2, min(64, args.cold_bytes // (k * n * 2)))
        weights = [torch.randn(n, k, device=dev, dtype=dtype) / k**0.5 for _ in range(copies)]
        for m in map(int, args.rows.split(",")):
            x = torch.randn(m, k, device=dev, dtype=dtype)
            row = {"gemm": name, "rows": m, "in_features": k, "out_features": n}
            for library in ("cublas", "cublaslt"):
                torch.backends.cuda.preferred_blas_library(library)
                row[f"{library}_us"] = 1e6 * graph_seconds(
                    [lambda w=w: torch.nn.functional.linear(x, w) for w in weights])
            torch.backends.cuda.preferred_blas_library("cublas")
            seconds, row["triton_config"] = triton_best(x, weights, torch.nn.functional.linear(x.float(),
                                                                                            weights[0].float()))
            row["triton_us"] = 1e6 * seconds
            print(json.dumps(row), flush=True)
            rows.append(row)
        del weights
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
