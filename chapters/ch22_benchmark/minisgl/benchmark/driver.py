"""Our engine on a benchmark workload, every output token timestamped: the offline benchmark's driver.

    with ours(model_path, workload, "ours") as run:   # the engine built once, warmed up with two short requests
        first = run()                                 # the whole workload: every request submitted at t = 0
        second = run()                                # ... again, in the same process, on the same engine

Each run returns a RunOutput: one RequestTrace per request (submitted at the run's t = 0), the wall time, the
tokens of the requests that finished, and the batches the scheduler ran (for the floor of its own schedule).
Every run starts with an empty prefix cache, as a fresh engine does: a repeated workload would otherwise find
its prompts cached and skip their prefill, and a second run would measure less work than the first. The
prefill tokens each run computed are counted, so that this can be checked (RunOutput.prefill_tokens).

The configurations `ours*` each turn one optimisation off (OURS); the benchmark's harness (benchmark/ at the
repository root, beside this package) runs them, and the peers, with the same protocol.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from tqdm import tqdm

from minisgl.benchmark.metrics import RequestTrace, TokenClock
from minisgl.benchmark.roofline import Step
from minisgl.benchmark.workload import Workload, describe
from minisgl import env
from minisgl.core import Batch, SamplingParams
from minisgl.env import ENV
from minisgl.scheduler.utils import PendingReq

class Config(NamedTuple):
    """One of our configurations: what it changes from the best one."""
    backend: str = "auto"  # attention backend
    overlap: bool = True  # overlap scheduling (chapter 11)
    graphs: bool = True  # CUDA graphs (chapter 18)
    fused: bool = True  # chapter 19's fused Triton kernels
    split_k: bool = True  # split-K decode (chapter 17)
    longest_first: bool = True  # the decode kernel's longest-first order (chapter 17)
    small_batch_block: bool = True  # larger key blocks for one-wave decode batches (chapter 17)


OURS = {
    "ours": Config(),
    "ours-fa": Config(backend="fa"),
    "ours-no-graphs": Config(graphs=False),
    "ours-no-overlap": Config(overlap=False),
    "ours-no-fused": Config(fused=False),
    "ours-no-splitk": Config(split_k=False),
    "ours-no-lpt": Config(longest_first=False),
    "ours-block-64": Config(small_batch_block=False),
    "ours-triton": Config(backend="triton"),
    "ours-torch": Config(backend="torch"),
}
_uids = itertools.count(1 << 40)  # far from LLM.generate's own uids (0, 1, ...), unique within a process


class Skipped(Exception):
    """A system that cannot run here (the reason is recorded in the results instead of a number)."""


@dataclass
class RunOutput:
    traces: list[RequestTrace]
    wall_s: float
    outputs: list[list[int] | None]  # tokens of every request, None for one that did not finish
    steps: list[Step] | None = None  # the batches our engine ran
    phases: list[str] | None = None
    config: dict = field(default_factory=dict)
    capped: bool = False  # stopped at its time limit
    prefill_tokens: int | None = None  # prompt tokens the run computed (None: the system does not say)

    @property
    def completed(self) -> int:
        return sum(o is not None for o in self.outputs)


class BatchLog:
    """Records every batch the scheduler runs: the contexts it reads and the new tokens it computes."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.phases: list[str] = []

    def on_batch(self, batch: Batch) -> None:
        self.steps.append(([r.device_len for r in batch.reqs], sum(r.extend_len for r in batch.reqs)))
        self.phases.append(batch.phase)

    @property
    def prefill_tokens(self) -> int:
        return sum(new for (_, new), phase in zip(self.steps, self.phases) if phase == "prefill")


def submit(scheduler, workload: Workload, sampling: dict | None = None) -> list[int]:
    """Queue every request of the workload (all checked first, so a bad one queues none); their uids. `sampling`:
    more SamplingParams fields, the same for every request (default: greedy)."""
    pending = [PendingReq(next(_uids), torch.tensor(ids, dtype=torch.int32),
                          SamplingParams(max_tokens=n, ignore_eos=True, **(sampling or {}))) for ids, n in workload]
    for p in pending:
        scheduler.check_request(p)
    for p in pending:
        scheduler.add_request(p)
    return [p.uid for p in pending]


def flush_prefix_cache(scheduler) -> int:
    """Evict every cached prefix (call when no request runs); the slots freed. The next run finds nothing cached."""
    cache = scheduler.cache_manager
    n = cache.prefix_cache.evictable_size
    cache.free(cache.prefix_cache.evict(n))
    return n


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def progress_bar(total: int, name: str, unit: str = "tok"):
    return tqdm(total=total, desc=name, unit=unit, disable=ENV.QUIET, smoothing=0.1)


def ours_config(name: str, device: torch.device, workload: Workload, page_size: int | None = None,
                cuda_graph_max_bs: int = 256) -> tuple[dict, bool]:
    """(LLM keyword arguments, overlap) of one of our configurations.

    The best configuration lets `auto` pick the attention backend (flash-attn prefill with the Triton decode
    kernel where both import; `ours-fa` is flash-attn for decode too), and gives it pages of 256 slots when
    flash-attn is installed (its paged kernels need them; the waste of up to 255 slots per request does not
    matter with 140 GB, and random prompts share no prefix that smaller pages could reuse), else pages of 1.
    """
    backend, overlap, graphs = OURS[name][:3]  # Config's first three fields
    fa = device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None
    if page_size is None:
        page_size = 256 if backend in ("auto", "fa", "hybrid") and fa else 1
    shape = describe(workload)
    kwargs = dict(device=device.type, attention_backend=backend, page_size=page_size,
                  max_running_reqs=shape["requests"], max_seq_len=shape["max_seq_len"])
    if device.type == "cuda":
        kwargs["cuda_graph_max_bs"] = cuda_graph_max_bs if graphs else 0  # 0 turns capture off (chapter 18)
    elif not graphs:
        raise Skipped("turning CUDA graphs off needs a CUDA device; this run has none to turn off")
    return kwargs, overlap


@contextmanager
def ours(model_path, workload: Workload, name: str = "ours", max_seconds: float | None = None,
         max_extend_tokens: int = 16384, page_size: int | None = None, cuda_graph_max_bs: int = 256,
         device: str | torch.device = "auto", dtype: str = "auto",
         sampling: dict | None = None, **engine_args) -> Iterator[Callable[[], RunOutput]]:
    """One of our configurations, built once and warmed up with two short requests; yields run(), which runs
    the whole workload once (or aborts what is left after max_seconds) and can be called again. `sampling`: more
    SamplingParams fields for every request of the workload; `engine_args`: more EngineConfig fields (the CPU
    benchmark sizes the KV pool with cpu_kv_cache_mb)."""
    from minisgl.llm import LLM

    triton_attention = _triton_attention()
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if str(device) == "auto" else device)
    kwargs, overlap = ours_config(name, device, workload, page_size, cuda_graph_max_bs)
    saved_env = env.ENV
    saved = ((triton_attention.MAX_SPLITS, triton_attention.LONGEST_FIRST, triton_attention.SMALL_BATCH_BLOCK)
             if triton_attention else None)
    config = OURS[name]
    if not config.fused:  # the fused kernels read the setting at every call (chapter 19)
        env.ENV = dataclasses.replace(saved_env, FUSED_KERNELS="off")
    if triton_attention:  # chapter 17's switches, read at every call (the longest-first one per decode batch)
        if not config.split_k:
            triton_attention.MAX_SPLITS = 1
        if not config.longest_first:
            triton_attention.LONGEST_FIRST = False
        if not config.small_batch_block:
            triton_attention.SMALL_BATCH_BLOCK = None
    llm = None
    try:
        llm = LLM(model_path, max_extend_tokens=max_extend_tokens, overlap=overlap, dtype=dtype, **kwargs,
                  **engine_args)
        warm = [ids[:8] for ids, _ in workload[:2]]
        llm.generate(warm, SamplingParams(max_tokens=4, ignore_eos=True, **(sampling or {})))  # kernels, memory
        yield lambda: _run_once(llm, workload, name, max_seconds, max_extend_tokens, device, sampling)
    finally:
        del llm
        env.ENV = saved_env
        if triton_attention:
            triton_attention.MAX_SPLITS, triton_attention.LONGEST_FIRST, triton_attention.SMALL_BATCH_BLOCK = saved


def run_ours(model_path, workload: Workload, name: str = "ours", max_seconds: float | None = None,
             max_extend_tokens: int = 16384, page_size: int | None = None, cuda_graph_max_bs: int = 256,
             device: str | torch.device = "auto", dtype: str = "auto") -> RunOutput:
    """One of our configurations on the workload, once: warm up, submit everything at t = 0, run to the end
    (or abort what is left after max_seconds)."""
    with ours(model_path, workload, name, max_seconds, max_extend_tokens, page_size, cuda_graph_max_bs, device,
              dtype) as run:
        return run()


def _run_once(llm, workload: Workload, name: str, max_seconds: float | None, max_extend_tokens: int,
              device: torch.device, sampling: dict | None = None) -> RunOutput:
    scheduler, log = llm.scheduler, BatchLog()
    flush_prefix_cache(scheduler)  # as a fresh engine: no prompt of an earlier run is cached
    scheduler.on_batch = log.on_batch
    total = sum(n for _, n in workload)
    sync(device)
    t0 = time.perf_counter()
    uids = submit(scheduler, workload, sampling)
    clock = TokenClock(uids, submit=t0)
    scheduler.on_token = clock.on_token
    capped = False

    def on_step() -> None:
        nonlocal capped
        bar.update(clock.count - bar.n)
        if max_seconds is not None and not capped and time.perf_counter() - t0 > max_seconds:
            capped = True  # abort what is left: each aborted request keeps the tokens it has
            for uid in uids:
                scheduler.abort_request(uid)

    try:
        with progress_bar(total, name) as bar:
            scheduler.run_until_idle(on_step)
        sync(device)
        wall = time.perf_counter() - t0
    finally:
        scheduler.on_token = scheduler.on_batch = None
    taken = [scheduler.take_finished(uid) for uid in uids]  # None for a request aborted at max_seconds
    outputs = [req.output_ids if req is not None else None for req in taken]
    scheduler.check_integrity()
    engine = llm.engine
    config = {"attention_backend": type(engine.attn_backend).__name__, "overlap": scheduler.config.overlap,
              "page_size": engine.config.page_size, "max_extend_tokens": max_extend_tokens,
              "dtype": engine.config.dtype, "max_running_reqs": engine.config.max_running_reqs,
              "cuda_graph_max_bs": engine.config.cuda_graph_max_bs, "fused_kernels": env.ENV.FUSED_KERNELS,
              "max_decode_splits": getattr(_triton_attention(), "MAX_SPLITS", None),
              "longest_first": getattr(_triton_attention(), "LONGEST_FIRST", None),
              "small_batch_block": getattr(_triton_attention(), "SMALL_BATCH_BLOCK", None)}
    return RunOutput(clock.ordered(uids), wall, outputs, log.steps, log.phases, config, capped, log.prefill_tokens)


def _triton_attention():
    """Chapter 17's Triton attention module (where split-K's cap on slices, the longest-first switch and the small
    batches' key blocks live), or None without triton."""
    try:
        from minisgl.kernel.triton import attention
    except ImportError:
        return None
    return attention
