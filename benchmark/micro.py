"""Micro-benchmarks: the machine's copy bandwidth and FLOP rate, the Triton decode kernel alone, and one
decode step of the whole engine, each next to the roofline floor it is judged by.

On a GPU the work is timed with CUDA events around many repetitions (launches are asynchronous, so a host
clock would time the launch, not the work); on a CPU with the host clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from minisgl.benchmark.roofline import decode_step_bytes


def seconds_per_call(fn: Callable[[], object], device: torch.device, iters: int, warmup: int = 3,
                     graph: bool = False) -> float:
    """Mean wall time of fn() over `iters` calls, after `warmup` calls (compilation, caches, clocks).

    graph=True (CUDA only) records the `iters` calls in one CUDA graph and times its replay: the GPU's time
    alone, as in the engine's captured decode steps. Without it, a call whose kernels finish faster than
    Python launches them is timed by its launches."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    for _ in range(warmup):
        fn()
    per_call = 1
    if graph and device.type == "cuda":
        recorded = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(device)
        with torch.cuda.graph(recorded):
            for _ in range(iters):
                fn()
        fn, per_call, iters = recorded.replay, iters, 3  # three replays of `iters` calls each
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000 / iters / per_call


def copy_bandwidth(device: torch.device, nbytes: int | None = None, iters: int = 20) -> dict:
    """Device-to-device copy of one large buffer: bytes read plus bytes written, per second.

    This is the bandwidth a streaming kernel can actually reach, usually 80-90% of the spec sheet's figure,
    and the one the floors use (a floor nobody can reach would flatter nobody)."""
    nbytes = nbytes or (2**30 if device.type == "cuda" else 2**26)
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    t = seconds_per_call(lambda: dst.copy_(src), device, iters)
    return {"bytes": nbytes, "seconds": t, "gbs": 2 * nbytes / t / 1e9}


def matmul_flops(device: torch.device, dtype: torch.dtype, n: int | None = None, iters: int = 10) -> float:
    """FLOP/s of one square matmul: a measured stand-in for the peak when no spec figure is known."""
    n = n or (8192 if device.type == "cuda" else 512)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return 2 * n**3 / seconds_per_call(lambda: a @ b, device, iters)


def decode_kernel_bandwidth(device: torch.device, context_lens: list[int], q_heads: int = 16, kv_heads: int = 8,
                            head_dim: int = 128, dtype: torch.dtype = torch.bfloat16, iters: int = 50,
                            splits: int | None = None, graph: bool = False) -> dict:
    """Chapter 17's Triton decode kernel on one layer: KV bytes read per second (`splits`: split-K slices per
    request, None for the kernel's own choice; graph: timed as a CUDA graph replay, see seconds_per_call).

    Request i's tokens sit in consecutive slots, as a freshly filled pool with pages of one slot hands them
    out; the page table still gives the kernel one slot per position, so it gathers exactly as in the engine.
    """
    from minisgl.kernel.triton.attention import paged_decode_attention  # imports triton: only when measured

    if not context_lens or min(context_lens) < 1:
        raise ValueError("context_lens needs at least one request, each with >= 1 token")
    lens = torch.tensor(context_lens, dtype=torch.int32)
    starts = torch.cumsum(lens, 0) - lens
    width = int(lens.max())
    table = (starts[:, None] + torch.arange(width, dtype=torch.int32)[None, :]).to(torch.int32)
    table = torch.where(torch.arange(width)[None, :] < lens[:, None], table, 0).to(device)
    slots = int(lens.sum())
    gen = torch.Generator(device=device).manual_seed(0)
    k = torch.randn(slots, kv_heads, head_dim, device=device, dtype=dtype, generator=gen)
    v = torch.randn(slots, kv_heads, head_dim, device=device, dtype=dtype, generator=gen)
    q = torch.randn(len(context_lens), q_heads, head_dim, device=device, dtype=dtype, generator=gen)
    rows = torch.arange(len(context_lens), dtype=torch.int32, device=device)
    seq_lens = lens.to(device)
    t = seconds_per_call(lambda: paged_decode_attention(q, k, v, table, rows, seq_lens, head_dim**-0.5,
                                                        splits=splits), device, iters, graph=graph)
    kv_bytes = 2 * slots * kv_heads * head_dim * k.element_size()
    return {"batch": len(context_lens), "mean_context": slots / len(context_lens), "q_heads": q_heads, "splits": splits,
            "kv_heads": kv_heads, "head_dim": head_dim, "dtype": str(dtype).removeprefix("torch."),
            "kv_bytes": kv_bytes, "seconds": t, "gbs": kv_bytes / t / 1e9}


def decode_split_sweep(device: torch.device, q_heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                       batches: tuple[int, ...] = (1, 8, 32, 64, 128, 256), context: int = 1024,
                       splits: tuple[int, ...] = (1, 2, 4, 8, 16), iters: int = 20) -> list[dict]:
    """The decode kernel at each batch size with each number of split-K slices, and with its own choice
    (splits None): the table that chooses how many slices a batch gets."""
    from minisgl.kernel.triton.attention import decode_splits

    rows = []
    for batch in batches:
        for n in (*splits, None):
            r = decode_kernel_bandwidth(device, [context] * batch, q_heads, kv_heads, head_dim, dtype, iters, n,
                                        graph=True)  # as the engine runs it: small batches take microseconds
            r["auto_splits"] = decode_splits(batch, kv_heads, device) if n is None else None
            rows.append(r)
    return rows


def model_gemm_shapes(mc) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each matrix multiply a decode step makes: four per layer and the LM head."""
    q, kv = mc.num_qo_heads * mc.head_dim, mc.num_kv_heads * mc.head_dim
    return {"qkv": (mc.hidden_size, q + 2 * kv), "o": (q, mc.hidden_size),
            "gate_up": (mc.hidden_size, 2 * mc.intermediate_size), "down": (mc.intermediate_size, mc.hidden_size),
            "lm_head": (mc.hidden_size, mc.vocab_size)}


def gemm_times(device: torch.device, mc, dtype: torch.dtype, rows: tuple[int, ...] = (1, 8, 64, 256),
               cold_bytes: int = 2**28, iters: int = 3) -> list[dict]:
    """PyTorch's matmul (cuBLAS on a GPU) for each of the model's GEMMs at each batch size, weights cold.

    One weight would stay in the L2 cache from one call to the next and be read at the cache's speed; the
    engine reads every weight once per step from memory. So each GEMM cycles through enough copies of its
    weight to fill `cold_bytes` (more than any L2), one copy per call, and the copies are timed as one CUDA
    graph (as the engine's decode steps run). The time per call against the weight's bytes shows how far a
    GEMM of a few rows is from streaming its weight at the copy bandwidth."""
    out = []
    for name, (k, n) in model_gemm_shapes(mc).items():
        weight_bytes = k * n * dtype.itemsize
        copies = max(1, min(64, cold_bytes // weight_bytes))
        weights = [torch.randn(n, k, device=device, dtype=dtype) for _ in range(copies)]
        for m in rows:
            x = torch.randn(m, k, device=device, dtype=dtype)
            calls = iter(range(2**62))
            t = seconds_per_call(lambda: torch.nn.functional.linear(x, weights[next(calls) % copies]), device,
                                 iters * copies, warmup=copies, graph=True)
            out.append({"gemm": name, "rows": m, "in_features": k, "out_features": n, "weight_bytes": weight_bytes,
                        "us": t * 1e6, "weight_gbs": weight_bytes / t / 1e9})
        del weights
    return out


def decode_step_time(llm, batch: int, prompt_len: int, steps: int, weight_bytes: int, kv_per_token: int,
                     bandwidth: float, skip: int = 4, seed: int = 0) -> dict:
    """Time the engine's decode steps with `batch` requests of `prompt_len` tokens, against their floor.

    All requests are prefilled first (the scheduler runs prefill before decode), then decode together for
    steps + 2 * skip steps; the middle `steps` are timed from the scheduler loop's per-step callback, so the
    time is what the loop really takes per step, with whatever overlap and graphs the engine uses.
    """
    from minisgl.benchmark.driver import BatchLog, submit

    if min(batch, prompt_len, steps, skip) < 1:
        raise ValueError("batch, prompt_len, steps and skip must be >= 1")
    gen = torch.Generator().manual_seed(seed)
    vocab = llm.engine.model_config.vocab_size
    workload = [(torch.randint(0, vocab, (prompt_len,), generator=gen).tolist(), steps + 2 * skip + 1)
                for _ in range(batch)]
    scheduler = llm.scheduler
    log = BatchLog()
    marks: list[float] = []  # host time after each loop iteration; batch i was launched in iteration i
    uids = submit(scheduler, workload)
    saved = scheduler.on_batch
    scheduler.on_batch = log.on_batch
    try:
        scheduler.run_until_idle(lambda: marks.append(time.perf_counter()))
    finally:
        scheduler.on_batch = saved
    for uid in uids:
        scheduler.take_finished(uid)
    decodes = [i for i, phase in enumerate(log.phases) if phase == "decode"]
    timed = decodes[skip : skip + steps]
    if len(timed) < steps or len(marks) < len(log.phases):
        raise RuntimeError(f"expected {steps + 2 * skip} decode steps of one batch, got {len(decodes)}")
    seconds = (marks[timed[-1]] - marks[timed[0] - 1]) / len(timed)
    floor = sum(decode_step_bytes(weight_bytes, kv_per_token, log.steps[i][0]) for i in timed) / len(timed)
    return {"batch": batch, "prompt_len": prompt_len, "steps_timed": len(timed),
            "mean_context": sum(sum(log.steps[i][0]) for i in timed) / len(timed) / batch,
            "ms_per_step": 1000 * seconds, "floor_ms": 1000 * floor / bandwidth, "bytes_per_step": floor,
            "ratio": seconds * bandwidth / floor}


def prefill_step_time(llm, tokens: int, prompt_len: int, batches: int, params: int, peak_flops: float,
                      skip: int = 1, seed: int = 0) -> dict:
    """Time prefill batches of `tokens` prompt tokens each (prompts of prompt_len, one output token, so nothing
    but prefill runs) against their compute floor, 2 x params FLOPs per token over the peak. The first `skip`
    batches are left out; the time is the scheduler loop's, as in decode_step_time."""
    from minisgl.benchmark.driver import BatchLog, submit

    if tokens % prompt_len or min(batches, skip) < 1:
        raise ValueError("tokens must be a multiple of prompt_len; batches and skip >= 1")
    gen = torch.Generator().manual_seed(seed)
    vocab = llm.engine.model_config.vocab_size
    count = tokens // prompt_len * (batches + skip + 1)  # one batch more: the last may be cut short
    workload = [(torch.randint(0, vocab, (prompt_len,), generator=gen).tolist(), 1) for _ in range(count)]
    scheduler, log, marks = llm.scheduler, BatchLog(), []
    uids = submit(scheduler, workload)
    saved, scheduler.on_batch = scheduler.on_batch, log.on_batch
    try:
        scheduler.run_until_idle(lambda: marks.append(time.perf_counter()))
    finally:
        scheduler.on_batch = saved
    for uid in uids:
        scheduler.take_finished(uid)
    full = [i for i, (_, new) in enumerate(log.steps) if new == tokens and log.phases[i] == "prefill"]
    timed = full[skip : skip + batches]  # fewer when the pool cannot hold that many at once: at least one
    if not timed or timed != list(range(timed[0], timed[0] + len(timed))) or timed[0] < 1:
        raise RuntimeError(f"expected {batches + skip} consecutive prefill batches of {tokens} tokens, got "
                           f"{[(p, n) for p, (_, n) in zip(log.phases, log.steps)]}")
    seconds = (marks[timed[-1]] - marks[timed[0] - 1]) / len(timed)
    floor = 2 * params * tokens / peak_flops
    return {"tokens": tokens, "prompt_len": prompt_len, "batches_timed": len(timed), "ms_per_batch": 1000 * seconds,
            "floor_ms": 1000 * floor, "ratio": seconds / floor}
