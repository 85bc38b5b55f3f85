"""The learner's loop, end to end: `make check` on a pristine skeleton, then on a finished chapter.

Works on a copy of chapters/ (MINISGL_CHAPTERS_DIR), so the repository's skeletons stay untouched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tools import skeleton
from tools.tree import ROOT, get_chapter

CH = 3


def check(chapters_dir, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MINISGL_CHAPTERS_DIR": str(chapters_dir), "MINISGL_CPU_THREADS": "1",
           "MINISGL_TEST_THREADS": "1", "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "tools.course", "check", str(CH), *flags], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def test_check_on_pristine_skeleton_then_on_the_solution(tmp_path):
    ch = get_chapter(CH)
    workspace = tmp_path / "chapters"
    shutil.copytree(ch.skeleton_dir, workspace / ch.slug)

    pristine = check(workspace)
    assert pristine.returncode != 0, pristine.stdout
    for stub in skeleton.stubs_of(ch):
        line = next((ln for ln in pristine.stdout.splitlines() if ln.startswith(stub.qualname + " ")), "")
        assert "not started" in line, f"{stub.qualname} should be listed as not started:\n{pristine.stdout}"

    for rel, src in skeleton.chapter_sources(ch).items():  # the learner finishes the chapter
        shutil.copy(src, workspace / ch.slug / rel)
    done = check(workspace)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "chapter 3 passes" in done.stdout
    assert "matches HF greedy: True" in done.stdout, "the example's output is shown after the table"
