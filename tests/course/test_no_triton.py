"""The course on a machine without Triton, as on a Mac (Triton has wheels for Linux only).

The environment without Triton is this one with triton taken out: a new virtual environment whose site-packages
link every package installed here except triton, so `import triton` fails there and everything else is the same
version as here. (Installing requirements.txt into it with pip instead took 2.5 minutes on this 2-core machine
at a load of 5 and more than 18 at a load of 10: the package proxy sends nothing pip may cache. That the packages
install without triton on a Mac is what test_wheels.py checks.) In it: `make run` generates text, the suites of
chapters 17 to 20 (the Triton chapters) and of chapter 5 (nothing of Triton) pass on their reference trees, every
Triton test skipped for the reason that names what to install, and chapter 17's example runs its torch half and says
what it leaves out. Chapters 17-20 are where Triton is imported; chapter 5 is the cheapest suite that exercises the
torch attention backend a Mac runs (the suites cost 10-55 s each here, the whole file about 3 minutes).
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tools.course import assemble, suite_of, tree_env
from tools.optional import installable_here, pinned
from tools.tree import ROOT, get_chapter

pytestmark = [pytest.mark.xdist_group("no-triton"), pytest.mark.timeout(1200)]

TRITON_SKIP = f"needs Triton (Linux only): pip install {pinned('triton')}"
CUDA_SKIP = "needs a CUDA GPU"  # the start of conftest's reason for tests marked gpu
CHAPTERS = {17: True, 18: False, 19: True, 20: True, 5: False}  # chapter -> has tests that need Triton
if not installable_here("triton"):
    pytest.skip("this check drops triton from a Linux install; here Triton is missing anyway", allow_module_level=True)


def _run(cmd: list[str], env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def no_triton(tmp_path_factory) -> dict[str, str]:
    """make's variables for the environment without Triton: PY, its interpreter, and DEPS, a stamp saying its
    packages are installed (so that make does not install requirements.txt, triton included, into it)."""
    venv = tmp_path_factory.mktemp("no-triton")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=300).check_returncode()
    here = Path(sysconfig.get_paths()["purelib"])
    there = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    for entry in here.iterdir():
        if entry.name != "triton" and not entry.name.startswith("triton-"):
            (there / entry.name).symlink_to(entry)
    py = venv / "bin" / "python"
    assert _run([str(py), "-c", "import torch, transformers, xgrammar"]).returncode == 0, f"{venv} lacks packages"
    assert _run([str(py), "-c", "import triton"]).returncode != 0, f"triton imports in {venv}"
    (venv / ".deps").touch()
    return {"PY": str(py), "DEPS": str(venv / ".deps")}


def _make(target: list[str], variables: dict[str, str]) -> subprocess.CompletedProcess:
    return _run(["make", *target, *(f"{k}={v}" for k, v in variables.items())])


def test_make_run_generates_without_triton(no_triton):
    proc = _make(["run"], no_triton)
    assert proc.returncode == 0 and "tokens/s" in proc.stdout, (
        f"make run without Triton:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    assert "installing Python packages" not in proc.stdout, "make run reinstalled the packages: its stamp is lost"


@pytest.mark.parametrize("n", list(CHAPTERS), ids=[f"ch{n:02d}" for n in CHAPTERS])
def test_chapter_suite_passes_without_triton(n, no_triton, tmp_path):
    ch = get_chapter(n)
    report = tmp_path / "report.jsonl"
    cmd = [no_triton["PY"], "-m", "pytest", str(suite_of(ch)), "-p", "tools.stubreport", f"--stub-report={report}",
           "-p", "no:cacheprovider", "-q", "--no-header", "--tb=short"]
    proc = _run(cmd, env=tree_env(assemble(n, "ref"), threads=1))
    records = [json.loads(line) for line in report.read_text().splitlines()]
    failed = [f"{r['test']}: {r.get('error')}: {r.get('message')}" for r in records if r["outcome"] == "failed"]
    assert proc.returncode == 0 and not failed, (
        f"chapter {n} without Triton:\n" + "\n".join(failed or [proc.stdout[-3000:]]))
    reasons = {r["test"]: r.get("message", "") for r in records if r["outcome"] == "skipped"}
    odd = {t: why for t, why in reasons.items() if why != TRITON_SKIP and not why.startswith(CUDA_SKIP)}
    assert not odd, f"chapter {n}: tests skipped for another reason than Triton or CUDA: {odd}"
    triton = sorted(t for t, why in reasons.items() if why == TRITON_SKIP)
    want = "some" if CHAPTERS[n] else "none"
    assert bool(triton) == CHAPTERS[n], f"chapter {n}: tests skipped for Triton {triton}, expected {want}"
    assert any(r["outcome"] == "passed" for r in records), f"chapter {n}: no test ran without Triton"


def test_chapter_17_example_runs_the_torch_backend_without_triton(no_triton):
    proc = _make(["run", "CH=17", "SOL=1"], no_triton)
    assert proc.returncode == 0, f"make run CH=17 SOL=1:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert f"do not run here: {TRITON_SKIP}" in proc.stdout and "torch backend:" in proc.stdout, proc.stdout[-2000:]
