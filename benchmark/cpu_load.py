"""How busy the machine was while a CPU benchmark ran: what a reader needs to trust a number from a shared CPU.

    meter = LoadMeter()          # at the start of a run
    ...                          # the run
    meter.stop()                 # {"loadavg": [...], "own_cpu_s": ..., "other_cpu_s": ..., "busy_others": [...]}

own_cpu_s is the CPU time of this process and its children (vLLM's engine and worker processes included);
other_cpu_s is what every other process on the machine used in the same interval (the system's busy time less
ours). On a quiet machine other_cpu_s stays near 0; a run where it is a large share of the wall time x cores
was measured beside other work. Needs only psutil, so it runs in the course's environment and in vLLM's.
"""

from __future__ import annotations

import os
import time

import psutil

BUSY_PERCENT = 10.0  # a process using more than this share of one core counts as busy


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


def tree_cpu_seconds(proc: psutil.Process | None = None) -> float:
    """user + system CPU seconds of `proc` (default: this process) and its live children, plus what its waited-for
    children used."""
    total = 0.0
    for p in _tree(proc or psutil.Process()):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue  # a child that ended in between
        total += t.user + t.system + (t.children_user + t.children_system if p.pid == os.getpid() else 0.0)
    return total


def system_busy_seconds() -> float:
    """CPU seconds every core has spent on anything but idling since boot."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def busy_others(interval: float = 0.2, limit: int = 5) -> list[dict]:
    """Other processes using more than BUSY_PERCENT of a core, busiest first (sampled over `interval` seconds)."""
    ours = {p.pid for p in _tree(psutil.Process())}
    procs = [p for p in psutil.process_iter(["pid", "name", "cmdline"]) if p.pid not in ours]
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.Error:
            pass
    time.sleep(interval)
    out = []
    for p in procs:
        try:
            pct = p.cpu_percent(None)
        except psutil.Error:
            continue
        if pct > BUSY_PERCENT:
            cmd = " ".join(p.info.get("cmdline") or [p.info.get("name") or "?"])
            out.append({"pid": p.pid, "cpu_percent": round(pct, 1), "cmd": cmd[:120]})
    return sorted(out, key=lambda d: -d["cpu_percent"])[:limit]


class LoadMeter:
    """The machine's load over one interval: load averages at its end, CPU time of ours and of everything else."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.own0 = tree_cpu_seconds()
        self.busy0 = system_busy_seconds()

    def stop(self) -> dict:
        wall = time.perf_counter() - self.t0
        own = tree_cpu_seconds() - self.own0
        busy = system_busy_seconds() - self.busy0
        return {"loadavg": [round(x, 2) for x in os.getloadavg()], "interval_s": wall, "own_cpu_s": own,
                "other_cpu_s": max(0.0, busy - own), "cores": psutil.cpu_count()}


def snapshot() -> dict:
    """The machine's state now: load averages and the other busy processes."""
    return {"loadavg": [round(x, 2) for x in os.getloadavg()], "cores": psutil.cpu_count(),
            "busy_others": busy_others()}
