"""Packages the course uses only where they exist, and the one sentence that says what is missing.

Triton ships wheels for Linux only (x86-64 and aarch64), so on a Mac the Triton kernels of chapters 17-20 cannot
run, not even in Triton's CPU interpreter. The engine imports it lazily and runs the torch backend without it;
tests, examples and `make check` skip what needs it with `missing("triton")`'s words.
"""

from __future__ import annotations

import importlib.util
import platform
import re
from functools import lru_cache
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements.txt"

# module -> (name in prose, where it runs, PyPI distribution)
OPTIONAL = {
    "triton": ("Triton", "Linux only", "triton"),
}


def this_platform() -> str:
    """'Linux x86-64', 'macOS arm64', ...: the words a learner knows their machine by."""
    system = {"Darwin": "macOS"}.get(platform.system(), platform.system())
    machine = {"AMD64": "x86-64", "x86_64": "x86-64", "arm64": "arm64", "aarch64": "aarch64"}
    return f"{system} {machine.get(platform.machine(), platform.machine())}"


@lru_cache(maxsize=None)
def pinned(distribution: str) -> str:
    """The requirement line requirements.txt pins `distribution` with (without its marker), else its bare name."""
    for line in REQUIREMENTS.read_text().splitlines():
        spec = line.split("#", 1)[0].split(";", 1)[0].strip()
        if re.match(rf"{re.escape(distribution)}\s*[=<>!~]", spec, re.IGNORECASE):
            return spec.replace(" ", "")
    return distribution


def installable_here(module: str) -> bool:
    return platform.system() == "Linux"  # Triton's wheels: Linux x86-64 and aarch64


@lru_cache(maxsize=None)
def missing(module: str) -> str | None:
    """None when `module` imports here, else why not and what to do, e.g.
    'needs Triton (Linux only): pip install triton==3.6.0'."""
    if importlib.util.find_spec(module) is not None:
        return None
    name, where, distribution = OPTIONAL[module]
    if installable_here(module):
        return f"needs {name} ({where}): pip install {pinned(distribution)}"
    return f"needs {name} ({where}; this machine is {this_platform()}): run it on Linux or in WSL2"
