"""GPU probe for chapter 16: the benchmark workload at tp_size 1 and 2, and the cost of one all-reduce.

    python -m benchmark.probes.tp_probe [--out tp.json] [--seqs 256]

Runs on a machine with 2+ GPUs, on the final reference tree. The workload is chapter 22's (nano-vllm's: 256
requests, random ids, lengths U[100, 1024]) on the Qwen3-0.6B-shaped model with random bf16 weights. The
all-reduce is timed on its own, NCCL between two GPUs, on the tensor a decode step reduces (batch x hidden, bf16),
and multiplied by the two reductions per layer of a step. Last, rank 0 of a TP=2 group profiles one decode-heavy
call (torch.profiler, CUDA graphs on): the time its GPU spends in NCCL kernels per decode step, against all its
kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from minisgl.benchmark.random_model import QWEN3_0_6B, make_model
from minisgl.benchmark.workload import nano_vllm_workload
from minisgl.core import SamplingParams
from minisgl.distributed import get_tp_info
from minisgl.llm import LLM

PROFILE_OUT = "MINISGL_TP_PROFILE_OUT"


class ProfiledLLM(LLM):
    """An LLM whose rank 0 profiles every call and writes the kernel totals to $MINISGL_TP_PROFILE_OUT."""

    def _run(self, pending):
        if not get_tp_info().is_primary or PROFILE_OUT not in os.environ:
            return super()._run(pending)
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            outputs = super()._run(pending)
            torch.cuda.synchronize()
        # Kernels only: the profiler's "nccl:all_reduce" ranges would count the same GPU time twice.
        kernels = [e for e in prof.key_averages() if e.device_type.name == "CUDA" and ":" not in e.key.split("(")[0]]
        nccl_us = sum(e.self_device_time_total for e in kernels if e.key.startswith("ncclDevKernel"))
        total_us = sum(e.self_device_time_total for e in kernels)
        decode_steps = sum(phase == "decode" for phase, _ in self.scheduler.history)
        top = sorted(kernels, key=lambda e: -e.self_device_time_total)[:8]
        Path(os.environ[PROFILE_OUT]).write_text(json.dumps({
            "decode_steps": decode_steps, "batches": len(self.scheduler.history),
            "nccl_ms_per_decode_step": round(nccl_us / 1000 / max(decode_steps, 1), 3),
            "all_kernels_ms_per_decode_step": round(total_us / 1000 / max(decode_steps, 1), 3),
            "top_kernels_ms": {e.key[:80]: round(e.self_device_time_total / 1000, 2) for e in top}}, indent=1))
        return outputs


def throughput(path: Path, tp_size: int, seqs: int) -> dict:
    workload = nano_vllm_workload(num_seqs=seqs)
    llm = LLM(path, tp_size=tp_size, device="cuda", dtype="bfloat16", max_running_reqs=256, max_seq_len=2304,
              page_size=256, memory_ratio=0.8)
    try:
        llm.generate([workload[0][0]], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
        params = [SamplingParams(max_tokens=n, ignore_eos=True) for _, n in workload]
        t0 = time.perf_counter()
        outputs = llm.generate([ids for ids, _ in workload], params)
        seconds = time.perf_counter() - t0
    finally:
        if tp_size > 1:
            llm.shutdown()
    tokens = sum(len(o["token_ids"]) for o in outputs)
    return {"tp_size": tp_size, "output_tokens": tokens, "seconds": round(seconds, 2),
            "tok_per_s": round(tokens / seconds, 1)}


def _allreduce_rank(rank: int, store_port: int, batches: list[int], hidden: int, out) -> None:
    torch.cuda.set_device(rank)
    store = dist.TCPStore("127.0.0.1", store_port, is_master=False)
    dist.init_process_group("nccl", store=store, rank=rank, world_size=2, device_id=torch.device(f"cuda:{rank}"))
    result = {}
    for batch in batches:
        x = torch.randn(batch, hidden, dtype=torch.bfloat16, device="cuda")
        for _ in range(20):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(200):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        result[batch] = round(start.elapsed_time(end) / 200 * 1000, 2)  # microseconds per all-reduce
    if rank == 0:
        out.put(result)
    dist.destroy_process_group()


def allreduce_us(batches: list[int], hidden: int) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # this process keeps the port
    procs = [ctx.Process(target=_allreduce_rank, args=(r, store.port, batches, hidden, out)) for r in range(2)]
    for p in procs:
        p.start()
    result = out.get(timeout=300)
    for p in procs:
        p.join(timeout=60)
    return result


def profile_tp2(path: Path, out: Path, batch: int = 64, prompt: int = 256, tokens: int = 128) -> dict:
    """Rank 0 of a TP=2 group under torch.profiler, on `batch` requests decoding `tokens` tokens each."""
    os.environ[PROFILE_OUT] = str(out)
    llm = ProfiledLLM(path, tp_size=2, device="cuda", dtype="bfloat16", max_running_reqs=batch,
                      max_seq_len=prompt + tokens + 256, page_size=256, memory_ratio=0.5)
    try:
        gen = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, 10000, (prompt,), generator=gen).tolist() for _ in range(batch)]
        llm.generate(prompts[:1], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up (profiled, discarded)
        llm.generate(prompts, SamplingParams(max_tokens=tokens, ignore_eos=True))
    finally:
        llm.shutdown()
        del os.environ[PROFILE_OUT]
    return {"batch": batch, "prompt": prompt, "tokens": tokens, **json.loads(out.read_text())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("tp_probe.json"))
    ap.add_argument("--model", type=Path, default=Path("build/bench/qwen3-0.6b-random"))
    ap.add_argument("--seqs", type=int, default=256)
    args = ap.parse_args()
    path = make_model(args.model)
    layers, hidden = QWEN3_0_6B["num_hidden_layers"], QWEN3_0_6B["hidden_size"]
    per_call = allreduce_us([1, 8, 64, 256], hidden)
    report = {"allreduce_us": per_call,
              "allreduce_ms_per_decode_step": {b: round(2 * layers * us / 1000, 3) for b, us in per_call.items()},
              "runs": [throughput(path, tp, args.seqs) for tp in (1, 2)],
              "profile_tp2_rank0": profile_tp2(path, args.out.with_suffix(".profile.json"))}
    print(json.dumps(report, indent=1))
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
