"""Imports flow one way in every chapter's tree (design, section 8): server -> scheduler -> engine ->
attention/models -> kvcache -> core, with no runtime import cycle, and the engine never needs the course's tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.imports import cycles, import_graph, layer_violations, problems
from tools.tree import STANDALONE, all_chapters, reference_files

CHAPTERS = [ch for ch in all_chapters() if ch.slug not in STANDALONE]

@pytest.mark.parametrize("ch", CHAPTERS, ids=[c.slug for c in CHAPTERS])
def test_imports_flow_one_way(ch):
    found = problems(reference_files(ch.number))
    assert not found, f"{ch.slug}: imports that break the one-way rule:\n" + "\n".join(found)


def _tree(tmp_path: Path, sources: dict[str, str]) -> dict[str, Path]:
    files = {}
    for rel, text in sources.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[rel] = path
    return files


def test_the_checker_finds_a_cycle_through_a_late_import(tmp_path):
    files = _tree(tmp_path, {
        "minisgl/__init__.py": "",
        "minisgl/attention/__init__.py": "",
        "minisgl/attention/base.py": "def f():\n    from minisgl.attention.utils import g\n",
        "minisgl/attention/utils.py": "from minisgl.attention.base import f\n",
    })
    assert cycles(import_graph(files)) == [["minisgl.attention.base", "minisgl.attention.utils"]]


def test_the_checker_ignores_type_checking_imports_and_flags_an_upward_import(tmp_path):
    files = _tree(tmp_path, {
        "minisgl/__init__.py": "",
        "minisgl/scheduler/__init__.py": "",
        "minisgl/scheduler/prefill.py": "from minisgl.scheduler import utils\n",
        "minisgl/scheduler/utils.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from minisgl.scheduler.prefill import X\n",
        "minisgl/engine/__init__.py": "",
        "minisgl/engine/engine.py": "import minisgl.scheduler.utils\n",
    })
    graph = import_graph(files)
    assert graph["minisgl.scheduler.prefill"] == {"minisgl.scheduler.utils"}, graph
    assert not cycles(graph)
    assert layer_violations(graph) == [
        "minisgl.engine.engine imports minisgl.scheduler.utils (layer 'llm' sits above 'engine')"]


def test_the_checker_flags_the_engine_reaching_into_the_course_or_the_harness(tmp_path):
    files = _tree(tmp_path, {
        "minisgl/__init__.py": "",
        "minisgl/benchmark/__init__.py": "",
        "minisgl/benchmark/driver.py": "from minisgl.benchmark import metrics\n",
        "minisgl/benchmark/metrics.py": "def f():\n    from benchmark.report import table\n    import tools.models\n",
    })
    assert sorted(problems(files)) == ["minisgl.benchmark.metrics imports benchmark.report",
                                       "minisgl.benchmark.metrics imports tools.models"], (
        "the package must run without the harness beside it (benchmark/) and without the course's tools")
