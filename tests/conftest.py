"""Shared fixtures of the chapter suites: model fixtures, the cached HF greedy reference, markers.

Chapter suites run against one assembled tree (put first on PYTHONPATH by tools/course.py), so they
import `minisgl` from there; the repository root is added here for `tools` and `tests.helpers`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

# The chapter suites compare float32 CPU runs with Hugging Face; on a GPU machine the engine's "auto" device
# would pick CUDA and bfloat16. So CUDA stays hidden unless GPU tests are asked for (make test-gpu sets
# MINISGL_GPU_TESTS=1 and selects the tests marked gpu).
GPU_TESTS = os.environ.get("MINISGL_GPU_TESTS") == "1"
if not GPU_TESTS:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

import torch  # noqa: E402

# Few threads: deterministic, and two suites can run side by side on a 2-core machine.
torch.set_num_threads(int(os.environ.get("MINISGL_TEST_THREADS", "2")))
os.environ.setdefault("MINISGL_QUIET", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(config, items):
    # A rule of an early chapter that a later one deliberately changes (chapter 7: a prompt longer than the
    # token budget waits; chapter 10: it runs in chunks) is only checked on trees before that chapter.
    tree_chapter = int(os.environ.get("MINISGL_TREE_CHAPTER", "-1"))
    for item in items:
        mark = item.get_closest_marker("superseded")
        if mark is not None and 0 <= mark.args[0] <= tree_chapter:
            item.add_marker(pytest.mark.skip(reason=f"chapter {mark.args[0]} changes this: {mark.args[1]}"))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and MINISGL_GPU_TESTS=1 (`make test-gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_qwen3() -> Path:
    from tools.models import ensure_model

    return ensure_model("tiny-qwen3")


@pytest.fixture(scope="session")
def tiny_llama() -> Path:
    from tools.models import ensure_model

    return ensure_model("tiny-llama")


@pytest.fixture(scope="session")
def smollm2() -> Path:
    from tools.models import ensure_model

    return ensure_model("smollm2")
