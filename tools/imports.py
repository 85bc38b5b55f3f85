"""The import graph of one assembled package tree: which `minisgl` module imports which, read with `ast`.

An edge is a runtime import: module level or inside a function, but not under `if TYPE_CHECKING:` (those
never run). `from minisgl.a import b` points at the module `minisgl.a.b` when that is a module of the tree,
otherwise at `minisgl.a`. Package `__init__` files are modules like any other (`minisgl.kvcache`).

    python -m tools.imports 18          # cycles and layer violations of chapter 18's reference tree
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from tools.tree import reference_files

PACKAGE = "minisgl"
# Imports flow one way, from the top of this list to the bottom (design, section 8): a module may import its
# own layer or any layer below it, never one above. Subpackages not listed here are not checked.
LAYERS = [
    ("router",),  # chapter 27: N servers behind sglang-router, and the model of its policy, above the server
    ("server", "benchmark", "teaching"),
    ("llm", "scheduler", "spec", "disagg"),  # spec (26): proposers and verification; disagg (29): prefill/decode schedulers
    ("engine",),
    ("attention", "models", "layers", "distributed"),
    ("moe",),  # chapter 20: routing and expert compute, used by layers/moe.py
    ("kvcache",),
    ("kernel", "quant"),  # quant (30): 8-bit formats and their multiplies, used by layers and the KV pool
    ("core", "env"),
]


def module_name(rel: str) -> str | None:
    """`minisgl/kvcache/base.py` -> `minisgl.kvcache.base`; `minisgl/kvcache/__init__.py` -> `minisgl.kvcache`."""
    if not rel.endswith(".py") or not rel.startswith(PACKAGE + "/"):
        return None
    parts = rel[: -len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST):
    """Every Import / ImportFrom node that runs (skips the bodies of `if TYPE_CHECKING:`)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.If) and _is_type_checking(node.test) and child in node.body:
                continue
            stack.append(child)


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the tree's modules it imports at run time."""
    modules = {name: path for rel, path in files.items() if (name := module_name(rel))}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative import: resolve against this module's package
                    package = name if is_package else name.rsplit(".", 1)[0]
                    package = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = f"{package}.{base}" if base else package
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None
    for rank, names in enumerate(LAYERS):
        if parts[1] in names:
            return rank
    return None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """'a imports b' for every import from a lower layer up to a higher one."""
    bad = []
    for src in sorted(graph):
        for dst in sorted(graph[src]):
            ls, ld = layer_of(src), layer_of(dst)
            if ls is not None and ld is not None and ld < ls:
                bad.append(f"{src} imports {dst} (layer '{LAYERS[ld][0]}' sits above '{LAYERS[ls][0]}')")
    return bad


# The course's own folders, and the benchmark harness beside the package: the engine must run without them.
COURSE_PACKAGES = ("tools", "tests", "practice", "benchmark")


def course_imports(files: dict[str, Path]) -> list[str]:
    """'a imports tools.x' for every engine module that reaches into the course's tooling or the harness."""
    bad = []
    for rel, path in sorted(files.items()):
        name = module_name(rel)
        if name is None:
            continue
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            bad += [f"{name} imports {t}" for t in targets if t.split(".")[0] in COURSE_PACKAGES]
    return bad


def problems(files: dict[str, Path]) -> list[str]:
    """Everything wrong with a tree's imports, one line each (empty: imports flow one way, no cycle)."""
    graph = import_graph(files)
    return [" <-> ".join(c) + " (cycle)" for c in cycles(graph)] + layer_violations(graph) + course_imports(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapter", type=int)
    args = parser.parse_args(argv)
    found = problems(reference_files(args.chapter))
    print("\n".join(found) or f"chapter {args.chapter}: no import cycle, imports flow one way")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
