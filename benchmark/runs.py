"""Every system measured the same way: warm-up runs of the whole workload thrown away, then several timed runs.

    measured = measure(run, runs=3, warmup_runs=1)   # run() runs the whole workload once, in this process
    spread([r.wall_s for r in measured.timed])       # {"n": 3, "min": ..., "median": ..., "max": ...}

Why the warm-up is a whole run, not a short request: a system may still compile on the first batch of a shape
it has not seen (nano-vllm's torch.compile'd layers, Triton's autotuner, transformers' graphs), and a short
request shows it few shapes. On a machine where no process has compiled before, that compilation lands in the
first timed run: nano-vllm's first process on a fresh H200 made 15,119 tok/s, its later ones about 19,000.
nano-vllm's own bench.py warms up in the same process and times the run after; one discarded run of the whole
workload is that protocol with nothing left to compile, and every system (ours, nano-vllm, Hugging Face) gets
the same. The timed runs after it give the spread: the headline is their median, min and max are shown beside it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Measured(Generic[T]):
    warmup: list[T] = field(default_factory=list)  # the discarded runs, in order
    timed: list[T] = field(default_factory=list)  # the runs that count
    warmup_seconds: list[float] = field(default_factory=list)  # host time of each discarded run


def measure(run: Callable[[], T], runs: int, warmup_runs: int,
            on_run: Callable[[str, int, T], None] | None = None) -> Measured[T]:
    """Call run() warmup_runs + runs times in this process: the first warmup_runs results are kept apart
    (discarded from every statistic), the next `runs` are the measurement. on_run(kind, i, result), kind
    "warm-up" or "timed", is called after each (for a progress line)."""
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    if warmup_runs < 0:
        raise ValueError(f"warmup_runs must be >= 0, got {warmup_runs}")
    out: Measured[T] = Measured()
    for i in range(warmup_runs):
        t0 = time.perf_counter()
        result = run()
        out.warmup_seconds.append(time.perf_counter() - t0)
        out.warmup.append(result)
        if on_run is not None:
            on_run("warm-up", i, result)
    for i in range(runs):
        result = run()
        out.timed.append(result)
        if on_run is not None:
            on_run("timed", i, result)
    return out


def spread(values: list[float | None]) -> dict | None:
    """n, min, median and max of the values that exist (None: a run where the metric is undefined); None if
    none exists. The median of an even count is the mean of the middle two."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"n": len(present), "min": min(present), "median": statistics.median(present), "max": max(present)}
