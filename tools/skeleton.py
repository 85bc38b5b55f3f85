"""Skeleton generation: chapters/chNN_slug/ is made from solutions/chNN_slug/ (design, section 3).

Every block between `# >>> solution` and `# <<< solution` becomes one line,
`raise NotImplementedError("TODO(chNN): Qualname")`, and the `# TODO(chNN): ...` comment above it
stays as the task statement. A manifest remembers what was generated, so that regeneration never
overwrites a file the learner has edited.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.tree import BEGIN_MARK, END_MARK, TODO_LINE, Chapter, all_chapters

MANIFEST = ".skeleton-manifest.json"


@dataclass(frozen=True)
class Stub:
    chapter: str  # "ch03"
    qualname: str  # "Qwen3Attention.forward"
    path: str  # package-relative path of the file holding it

    @property
    def ident(self) -> str:
        return f"TODO({self.chapter}): {self.qualname}"


class MarkerError(ValueError):
    pass


def _qualname_at(tree: ast.Module, lineno: int) -> str:
    """Dotted name of the innermost function (and its classes) that contains line `lineno`."""
    names: list[str] = []
    body = tree.body
    while True:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                node.lineno <= lineno <= node.end_lineno
            ):
                names.append(node.name)
                body = node.body
                break
        else:
            return ".".join(names)


def _function_at(tree: ast.Module, lineno: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function that contains line `lineno`."""
    found = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= lineno <= node.end_lineno:
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


def _yields_only_inside(func: ast.AST, first: int, last: int) -> bool:
    """Whether the function is a generator only because of yields on lines first..last (1-based): its skeleton,
    which loses those lines, must keep a yield, or an `async for` over it would meet a coroutine instead."""
    own = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue  # a nested function's yields are its own
            if isinstance(child, (ast.Yield, ast.YieldFrom)):
                own.append(child.lineno)
            visit(child)

    visit(func)
    return bool(own) and all(first <= n <= last for n in own)


def _blocks(text: str, where: str) -> list[tuple[int, int]]:
    """(begin, end) 0-based line indexes of every marked block, validated."""
    lines = text.splitlines()
    blocks, begin = [], None
    for i, line in enumerate(lines):
        if BEGIN_MARK.match(line):
            if begin is not None:
                raise MarkerError(f"{where}:{i + 1}: nested '# >>> solution'")
            begin = i
        elif END_MARK.match(line):
            if begin is None:
                raise MarkerError(f"{where}:{i + 1}: '# <<< solution' without a matching begin")
            blocks.append((begin, i))
            begin = None
    if begin is not None:
        raise MarkerError(f"{where}:{begin + 1}: '# >>> solution' is never closed")
    return blocks


def _todo_above(lines: list[str], begin: int) -> re.Match | None:
    """The `# TODO(chNN):` line heading the comment block right above a marker (it may span lines)."""
    i = begin - 1
    while i >= 0 and lines[i].lstrip().startswith("#"):
        m = TODO_LINE.match(lines[i])
        if m:
            return m
        i -= 1
    return None


def render(text: str, chapter: str, where: str, rel_path: str = "") -> tuple[str, list[Stub]]:
    """The skeleton version of one solution file and the stubs it contains."""
    blocks = _blocks(text, where)
    if not blocks:
        return text, []
    tree = ast.parse(text, filename=where)
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    stubs: list[Stub] = []
    cursor = 0
    for begin, end in blocks:
        m = _todo_above(lines, begin)
        if not m:
            raise MarkerError(f"{where}:{begin + 1}: a solution block needs a '# TODO({chapter}): ...' line above it")
        if m.group(1) != chapter:
            raise MarkerError(f"{where}:{begin}: TODO names {m.group(1)} but the file belongs to {chapter}")
        qualname = _qualname_at(tree, begin + 1)
        if not qualname:
            raise MarkerError(f"{where}:{begin + 1}: a solution block must sit inside a function")
        indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
        stub = Stub(chapter, qualname, rel_path)
        out.extend(lines[cursor:begin])
        out.append(f'{indent}raise NotImplementedError("{stub.ident}")\n')
        func = _function_at(tree, begin + 1)
        if func is not None and _yields_only_inside(func, begin + 1, end + 1):
            out.append(f"{indent}yield  # never reached: it keeps this function a generator, as the solution is\n")
        cursor = end + 1
        if stub not in stubs:
            stubs.append(stub)
    out.extend(lines[cursor:])
    return "".join(out), stubs


def chapter_sources(ch: Chapter) -> dict[str, Path]:
    """Every file of a solution chapter folder, main.py included."""
    out = {}
    for p in sorted(ch.solution_dir.rglob("*")):
        rel = p.relative_to(ch.solution_dir)
        if p.is_file() and "__pycache__" not in rel.parts and p.suffix != ".pyc":
            out[rel.as_posix()] = p
    return out


def generate(ch: Chapter) -> tuple[dict[str, str], list[Stub]]:
    """Skeleton contents (relative path -> text) and the stubs of one chapter."""
    files: dict[str, str] = {}
    stubs: list[Stub] = []
    for rel, src in chapter_sources(ch).items():
        text = src.read_text()
        if src.suffix == ".py":
            text, found = render(text, ch.tag, str(src), rel)
            stubs.extend(found)
        files[rel] = text
    return files, stubs


def stubs_of(ch: Chapter) -> list[Stub]:
    return generate(ch)[1]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _manifest(ch: Chapter) -> dict[str, str]:
    path = ch.skeleton_dir / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def write(ch: Chapter, force: bool = False) -> list[str]:
    """Write chapters/<slug>/ from the solution; returns the messages about files kept as they are."""
    files, _ = generate(ch)
    manifest = _manifest(ch)
    kept: list[str] = []
    for rel, text in files.items():
        target = ch.skeleton_dir / rel
        if target.exists():
            current = target.read_text()
            pristine = manifest.get(rel) == _digest(current)
            if current != text and not pristine and not force:
                kept.append(f"kept {target.relative_to(ch.skeleton_dir.parent.parent)}: you edited it "
                            f"(make reset CH={ch.number} saves a backup and restores the skeleton)")
                continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (ch.skeleton_dir / MANIFEST).write_text(_manifest_text(files))
    return kept


def _manifest_text(files: dict[str, str]) -> str:
    return json.dumps({rel: _digest(text) for rel, text in files.items()}, indent=1, sort_keys=True) + "\n"


def edited_files(ch: Chapter) -> list[str]:
    """The learner's changes: files of chapters/<slug>/ that differ from the pristine skeleton, or are extra."""
    files, _ = generate(ch)
    on_disk = {p.relative_to(ch.skeleton_dir).as_posix(): p for p in ch.skeleton_dir.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts} if ch.skeleton_dir.is_dir() else {}
    on_disk.pop(MANIFEST, None)
    return sorted(rel for rel in set(files) | set(on_disk)
                  if rel not in files or rel not in on_disk or on_disk[rel].read_text() != files[rel])


def _git_blob_id(text: str) -> str:
    """The id git gives a file with this content (what `git ls-files -s` lists)."""
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tracked_skeleton(ch: Chapter) -> dict[str, str] | None:
    """Relative path -> git blob id of every file git holds (committed or staged) under chapters/<slug>/;
    None outside a git checkout (a downloaded archive)."""
    if not ch.skeleton_dir.is_dir():
        return None
    try:
        out = subprocess.run(["git", "ls-files", "--stage", "-z", "--", "."], cwd=ch.skeleton_dir,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    blobs = {}
    for entry in filter(None, out.split("\0")):
        meta, rel = entry.split("\t", 1)
        blobs[rel] = meta.split()[1]
    return blobs or None


def out_of_sync(ch: Chapter) -> list[str]:
    """Differences between the skeleton git holds (committed or staged) and what generation produces (for CI).

    Git's copy, not the working files: a learner's own edits under chapters/ are theirs and never fail this
    check. Outside a git checkout the working files are compared instead."""
    files, _ = generate(ch)
    files[MANIFEST] = _manifest_text(files)
    tracked = tracked_skeleton(ch)
    if tracked is None:  # no git: the files on disk
        tracked = {p.relative_to(ch.skeleton_dir).as_posix(): _git_blob_id(p.read_text())
                   for p in ch.skeleton_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts} \
            if ch.skeleton_dir.is_dir() else {}
    problems = []
    for rel, text in files.items():
        if rel not in tracked:
            problems.append(f"{ch.slug}/{rel}: missing")
        elif tracked[rel] != _git_blob_id(text):
            problems.append(f"{ch.slug}/{rel}: " + ("stale" if rel == MANIFEST else "differs from its solution"))
    problems += [f"{ch.slug}/{rel}: not in the solution" for rel in sorted(set(tracked) - set(files))]
    return problems


SYNC_ADVICE = ("run `make skeletons` and commit (or `git add`) the result. This maintainers' check compares the "
               "skeletons git holds with solutions/; edits you have not committed never fail it. If you committed "
               "your own chapter work, it is yours: run `make test` on a fresh clone of the course instead.")


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Generate chapter skeletons from the solutions.")
    ap.add_argument("--check", action="store_true", help="fail if any committed skeleton is out of date")
    args = ap.parse_args()
    if args.check:
        problems = [p for ch in all_chapters() for p in out_of_sync(ch)]
        for p in problems:
            print("out of sync:", p)
        print("skeletons in sync" if not problems else SYNC_ADVICE)
        return 1 if problems else 0
    for ch in all_chapters():
        for message in write(ch):
            print(message)
    print(f"skeletons written for {len(all_chapters())} chapters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
