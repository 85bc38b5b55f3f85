"""Every third-party package the course's code imports is named in requirements.txt.

CI installs requirements.txt into a fresh virtual environment, as the README tells a learner to (.ci/run), so a
package that a test, the engine or a tool imports but that arrives only as another package's dependency (jsonschema
through nbformat, pydantic through fastapi) works today and breaks the day that package drops it; one that is only
on the maintainer's machine (scipy) breaks at once. Import names map to distributions through the installed
packages' metadata (importlib.metadata.packages_distributions); the standard library through
sys.stdlib_module_names; the course's own modules are left out.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements.txt"

# The code checked: the tests and the practice runner and problems (the brief of this check), and what they run:
# the engine's reference files, the tools, the benchmark harness, the examples and the book's hooks.
SCANNED = ("tests", "practice", "solutions", "tools", "benchmark", "examples", "docs/hooks")
COURSE_PACKAGES = {"minisgl", "tools", "benchmark", "practice", "tests"}
# Imported only where they exist, never installed by requirements.txt; each import of them is lazy or guarded.
NOT_REQUIRED = {
    "flash_attn": "chapter 17's flash-attn backend: CUDA only, installed on the GPU machine",
    "nanovllm": "chapter 22's GPU peer, run from a checkout (NANO_VLLM=path)",
    "vllm": "the CPU benchmark's peer (benchmark/vllm_cpu.py), installed in a virtual environment of its own",
}


def normalized(name: str) -> str:
    """PEP 503's form of a distribution name: PyYAML, pyyaml and py_yaml are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def required() -> set[str]:
    names = set()
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(normalized(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line).group()))
    return names


def source_files() -> list[Path]:
    return sorted(p for folder in SCANNED for p in (ROOT / folder).rglob("*.py"))


def local_modules(files: list[Path]) -> set[str]:
    """Modules of the repository that code imports by their bare name (tests' helpers, practice's runner, a
    problem's solution, chapter 0's tiny_engine), beside the course's packages."""
    return COURSE_PACKAGES | {p.stem for p in files} | {p.parent.name for p in files if p.name == "__init__.py"}


def top_level_imports(path: Path) -> set[str]:
    """Every absolute import in the file, at any depth (a lazy import inside a function counts too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def unlisted_imports() -> list[str]:
    """'file imports module (distribution)' for each third-party import that requirements.txt does not name."""
    files = source_files()
    local, listed = local_modules(files), required()
    distributions = metadata.packages_distributions()
    problems = []
    for path in files:
        for module in sorted(top_level_imports(path)):
            if module in sys.stdlib_module_names or module in local or module in NOT_REQUIRED or module == "__future__":
                continue
            dists = distributions.get(module, [])
            if not any(normalized(d) in listed for d in dists):
                found = ", ".join(sorted(set(dists))) or "not installed here"
                problems.append(f"{path.relative_to(ROOT)} imports {module} (distribution: {found})")
    return problems


def test_every_imported_package_is_named_in_requirements():
    problems = unlisted_imports()
    assert not problems, ("requirements.txt does not name these packages; add each distribution to it (a package "
                          "that comes only with another can vanish with it), or stop importing it:\n  "
                          + "\n  ".join(problems))

