"""What a result must say about the machine it was measured on, and whether that machine was fresh.

A system's first process on a machine can be slower than every later one: it compiles what later processes
find in the on-disk caches (torch.compile's, Triton's). The benchmark warms every system up in its own process
(runs.py), so a number should no longer depend on that, but the record keeps the machine's state so that a
reader can check: taken when the process starts, before anything in it has compiled.

    fresh                    no earlier benchmark process since the machine booted, and both compile caches empty
    earlier_bench_processes  benchmark processes that started on this machine since it booted (a ledger file in
                             the temporary folder, one line per process: MINISGL_BENCH_LEDGER moves it)
    compile_caches           files in torch.compile's (inductor) cache and entries in Triton's cache, at start
    uptime_s, boot_id, load_1m, hostname, gpu (name, driver, memory in use, clocks, temperature: nvidia-smi)
"""

from __future__ import annotations

import getpass
import json
import os
import platform
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

FILE_COUNT_CAP = 100_000  # counting stops here: "at least this many" is all a reader needs


def environment(device: torch.device) -> dict:
    """Date, device name, CUDA and the versions of the software that decides the speed."""
    from importlib import metadata

    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for dist, module in (("transformers", "transformers"), ("triton", "triton"), ("flash-attn", "flash_attn")):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:  # flash-attn may be unpacked outside site-packages
            versions[dist] = None
            if dist == "flash-attn" and device.type == "cuda":
                try:
                    versions[dist] = __import__(module).__version__
                except ImportError:
                    pass
    gpu = (torch.cuda.get_device_name(device) if device.type == "cuda"
           else f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)")
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
            "cuda": torch.version.cuda if device.type == "cuda" else None, "versions": versions}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def boot_id() -> str | None:
    return _read("/proc/sys/kernel/random/boot_id")


def uptime_s() -> float | None:
    text = _read("/proc/uptime")
    return float(text.split()[0]) if text else None


def count_files(folder: Path, cap: int = FILE_COUNT_CAP) -> int:
    """Files under `folder` (0 if it does not exist), counted up to `cap`."""
    n = 0
    for _, _, files in os.walk(folder):
        n += len(files)
        if n >= cap:
            return cap
    return n


def inductor_cache_dir() -> Path:
    """torch.compile's cache: TORCHINDUCTOR_CACHE_DIR, else torch's default (/tmp/torchinductor_<user>)."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return Path(default_cache_dir())
    except ImportError:  # another torch layout: its documented default
        return Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"


def triton_cache_dir() -> Path:
    """Triton's cache of compiled kernels: TRITON_CACHE_DIR, else ~/.triton/cache."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return Path(os.environ["TRITON_CACHE_DIR"])
    return Path(os.environ.get("TRITON_HOME", Path.home())) / ".triton" / "cache"


def ledger_path() -> Path:
    if os.environ.get("MINISGL_BENCH_LEDGER"):
        return Path(os.environ["MINISGL_BENCH_LEDGER"])
    return Path(tempfile.gettempdir()) / f"minisgl-bench-{getpass.getuser()}.jsonl"


def sign_ledger(path: Path, entry: dict) -> int:
    """Append this process to the ledger; the number of earlier entries made since the same boot."""
    earlier = 0
    try:
        text = path.read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        try:
            earlier += json.loads(line).get("boot_id") == entry["boot_id"]
        except (ValueError, AttributeError):
            continue  # a line cut short by a process that died while writing: not a process we can count
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:  # after a torn last line, on a line of its own
            f.write(("\n" if text and not text.endswith("\n") else "") + json.dumps(entry) + "\n")
    except OSError:
        pass  # a read-only temporary folder: the count stays what it was
    return earlier


NVIDIA_SMI_FIELDS = ("name", "driver_version", "memory.used", "memory.total", "temperature.gpu", "clocks.sm",
                     "clocks.max.sm", "power.draw", "utilization.gpu")


def nvidia_smi(index: int = 0) -> dict | None:
    """The GPU as nvidia-smi reports it, or None where there is none (a CPU machine)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}",
                              "--format=csv,noheader,nounits", f"--id={index}"],
                             capture_output=True, text=True, timeout=20, check=True).stdout.strip()
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader", f"--id={index}"],
                              capture_output=True, text=True, timeout=20, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    values = [v.strip() for v in out.split(",")]
    if len(values) != len(NVIDIA_SMI_FIELDS):
        return None
    info = dict(zip(NVIDIA_SMI_FIELDS, values))
    info["compute_processes"] = len(apps)
    return info


def machine_state(systems: list[str] | None = None, session: str | None = None) -> dict:
    """The machine as this process finds it; call before anything compiles (it signs the ledger once)."""
    boot = boot_id()
    caches = {"inductor_dir": str(inductor_cache_dir()), "inductor_files": count_files(inductor_cache_dir()),
              "triton_dir": str(triton_cache_dir()), "triton_files": count_files(triton_cache_dir())}
    earlier = sign_ledger(ledger_path(), {"boot_id": boot, "pid": os.getpid(), "time": time.time(),
                                          "systems": systems or [], "session": session})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"fresh": earlier == 0 and caches["inductor_files"] == 0 and caches["triton_files"] == 0,
            "earlier_bench_processes": earlier, "compile_caches": caches, "uptime_s": uptime_s(),
            "boot_id": boot, "hostname": platform.node(), "load_1m": load, "pid": os.getpid(),
            "session": session, "gpu": nvidia_smi() if torch.cuda.is_available() else None}


def describe_state(m: dict | None) -> str:
    """One line for a report: 'fresh' or what made it not fresh."""
    if not m:
        return "not recorded"
    if m.get("fresh"):
        return "fresh"
    c = m.get("compile_caches") or {}
    parts = []
    if m.get("earlier_bench_processes"):
        parts.append(f"{m['earlier_bench_processes']} earlier bench process(es) since boot")
    if c.get("inductor_files"):
        parts.append(f"{c['inductor_files']:,} torch.compile cache files")
    if c.get("triton_files"):
        parts.append(f"{c['triton_files']:,} Triton cache files")
    return "not fresh: " + ", ".join(parts) if parts else "not fresh"
