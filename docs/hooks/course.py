"""mkdocs hooks for the course book: include code, package trees and outputs by directive.

Directive lines (each alone on its line, outside code fences, may be indented, e.g. inside an
admonition or a content tab; the expansion keeps the indentation):

    ::code solutions/<slug>/<path>.py Symbol      a class, function, Class.method or module-level
                                                   assignment, with decorators, dedented
    ::code solutions/<slug>/<path>                the whole file
    ::tree N                                      the package tree of the reference tree at chapter N
                                                   with (new)/(modified) marks and counts
    ::output <slug>                               docs/outputs/<slug>.txt (made by `make outputs`)
    ::problems [N]                                the practice problems (all, or chapter N's), each
                                                   title linked to its page

The hook also generates one page per practice problem (practice/<id>.md, from practice/problems/<id>/:
links back to all problems and the chapter, statement, the browser judge's editor and buttons, the
explanation folded; practice.js runs it) and puts those pages in the nav under Practice > Chapter N.
A stage page (stages/*.md) becomes its nav section's index, so the stage is listed once.

Code that holds a TODO stub (a `# >>> solution` ... `# <<< solution` block) shows twice: the learner's
skeleton version (TODO comment and `raise NotImplementedError`) open, and the reference folded below it
(closed, titled "Reference solution: ..."); given code shows once, open. Marker lines never show.
Any problem (missing file, missing symbol, unknown directive, missing output) fails the build with
a PluginError naming the page and line.
"""

from __future__ import annotations

import ast
import logging
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import tree as course_tree  # noqa: E402

log = logging.getLogger("mkdocs.hooks.course")

OUTPUTS_DIR = "docs/outputs"  # relative to ROOT

FENCE_OPEN = re.compile(r"^\s*(`{3,}|~{3,})")
DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)::(?P<name>[a-z][a-z_]*)(?P<args>(?:[ \t].*)?)$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MARKER_LEFT = re.compile(r"(>>>|<<<) solution")
LANGS = {".py": "python", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json", ".sh": "bash",
         ".md": "markdown", ".txt": "text", ".cfg": "ini", ".ini": "ini"}


class DirectiveError(Exception):
    """A problem with one directive; turned into a PluginError with the page and line."""


# --------------------------------------------------------------------------------------------
# ::code


def _resolve_repo_path(rel: str) -> Path:
    if rel.startswith("/") or "\\" in rel:
        raise DirectiveError(f"path must be relative to the repository root, got {rel!r}")
    path = (ROOT / rel).resolve()
    try:
        path.relative_to(ROOT.resolve())
    except ValueError:
        raise DirectiveError(f"path {rel!r} is outside the repository") from None
    if not path.is_file():
        raise DirectiveError(f"file not found: {rel}")
    return path


def _display_path(rel: str) -> str:
    """solutions/ch02_layers/minisgl/layers/norm.py -> minisgl/layers/norm.py"""
    parts = rel.split("/")
    if len(parts) >= 3 and parts[0] in ("solutions", "chapters") and re.fullmatch(r"ch\d\d_\w+", parts[1]):
        return "/".join(parts[2:])
    return rel


def _fence_for(text: str, char: str = "`") -> str:
    longest = max((len(m) for m in re.findall(re.escape(char) + "+", text)), default=0)
    return char * max(3, longest + 1)


def _children(node: ast.AST) -> list[ast.stmt]:
    return list(getattr(node, "body", []))


def _names_of(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        out: list[str] = []
        for target in stmt.targets:
            elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            out += [e.id for e in elts if isinstance(e, ast.Name)]
        return out
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    if hasattr(ast, "TypeAlias") and isinstance(stmt, ast.TypeAlias):  # Python 3.12+
        return [stmt.name.id]
    return []


def find_symbol(source: str, qualname: str, filename: str = "<source>") -> list[ast.stmt]:
    """The statements defining `qualname` (several for a property with a setter, overloads...)."""
    try:
        module = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise DirectiveError(f"{filename} does not parse: {exc}") from None
    scope: ast.AST = module
    where = filename
    parts = qualname.split(".")
    for i, part in enumerate(parts):
        matches = [s for s in _children(scope) if part in _names_of(s)]
        if not matches:
            available = sorted({n for s in _children(scope) for n in _names_of(s)})
            hint = ", ".join(available) if available else "nothing"
            raise DirectiveError(f"symbol {qualname!r} not found: no {part!r} in {where} (it defines: {hint})")
        if i == len(parts) - 1:
            return matches
        containers = [s for s in matches if isinstance(s, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
        if not containers:
            raise DirectiveError(f"symbol {qualname!r}: {part!r} in {where} is not a class or function")
        scope = containers[-1]  # the last definition wins, as at run time
        where = f"{'.'.join(parts[: i + 1])}"
    raise AssertionError("unreachable")


def _stmt_source(lines: list[str], stmt: ast.stmt) -> str:
    start = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
    end = stmt.end_lineno or stmt.lineno
    chunk = lines[start - 1 : end]
    first = chunk[0]
    indent = first[: len(first) - len(first.lstrip())]
    out = []
    for line in chunk:
        if line.startswith(indent):
            line = line[len(indent) :]
        out.append(line)
    return "".join(out)


def _read_source(rel: str, symbol: str | None) -> tuple[str, str]:
    """(path's text, the text to show before marker handling) for `::code rel [symbol]`."""
    path = _resolve_repo_path(rel)
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DirectiveError(f"{rel} is not UTF-8 text") from None
    if symbol is None:
        return source, source
    if path.suffix != ".py":
        raise DirectiveError(f"a symbol can only be picked from a .py file, not {rel}")
    return source, _pick(source, symbol, rel)


def _pick(source: str, symbol: str, rel: str) -> str:
    lines = source.splitlines(keepends=True)
    stmts = find_symbol(source, symbol, filename=rel)
    return "\n".join(_stmt_source(lines, s).rstrip("\n") + "\n" for s in stmts)


def _finish(text: str, rel: str, symbol: str | None) -> str:
    """Check that no marker is left, trim blank edges, end with one newline."""
    for n, line in enumerate(text.splitlines(), 1):
        if MARKER_LEFT.search(line) and line.lstrip().startswith("#"):
            raise DirectiveError(f"a solution marker is left in the included code ({rel}, line {n}: {line.strip()!r})")
    text = text.strip("\n")
    if not text:
        raise DirectiveError(f"nothing to include from {rel}" + (f" {symbol}" if symbol else ""))
    return text + "\n"


def extract_code(rel: str, symbol: str | None = None) -> str:
    """The reference code for `::code rel [symbol]`: marker lines removed, trailing newline."""
    _, text = _read_source(rel, symbol)
    return _finish(course_tree.strip_markers(text), rel, symbol)


def _has_stub(text: str) -> bool:
    return any(course_tree.BEGIN_MARK.match(line) for line in text.splitlines())


def _chapter_of(rel: str) -> str | None:
    """solutions/ch10_chunked_prefill/... -> "ch10" (the chapter whose TODOs the file holds)."""
    m = re.fullmatch(r"solutions/(ch\d\d)_\w+/.+", rel)
    return m.group(1) if m else None


def extract_skeleton(rel: str, symbol: str | None = None) -> tuple[str, list[str]] | None:
    """What the learner's skeleton shows for `::code rel [symbol]`, and the stubs in it (None: no stub there)."""
    from tools import skeleton

    source, text = _read_source(rel, symbol)
    if not _has_stub(text):
        return None
    chapter = _chapter_of(rel)
    if chapter is None:
        raise DirectiveError(f"{rel} has solution markers but is not a chapter's solution file (solutions/chNN_slug/...)")
    try:
        skeleton_source, stubs = skeleton.render(source, chapter, rel)
    except (skeleton.MarkerError, SyntaxError) as exc:
        raise DirectiveError(f"cannot make the skeleton of {rel}: {exc}") from None
    shown = skeleton_source if symbol is None else _pick(skeleton_source, symbol, rel)
    names = [s.qualname for s in stubs if f"\"{s.ident}\")" in shown]
    return _finish(shown, rel, symbol), names


def _fenced(text: str, lang: str, title: str) -> str:
    fence = _fence_for(text)
    return f'{fence}{lang} title="{title}"\n{text}{fence}\n'


def render_code(rel: str, symbol: str | None = None) -> str:
    """Given code: one open block. Code with a TODO stub: the learner's skeleton open, the reference folded."""
    lang = LANGS.get(Path(rel).suffix, "text")
    shown = _display_path(rel)
    reference = _fenced(extract_code(rel, symbol), lang, shown)
    skeleton = extract_skeleton(rel, symbol) if lang == "python" else None
    if skeleton is None:
        return reference
    skeleton_text, stubs = skeleton
    what = symbol or shown
    todo = ", ".join(f"`{name}`" for name in stubs)
    learner_file = "chapters/" + rel.removeprefix("solutions/")
    number = int(_chapter_of(rel)[2:])
    warning = (f"This is the answer to the exercise ({todo}). Write your own version in `{learner_file}` "
               f"first, pass `make check CH={number}`, then compare.")
    folded = f"{warning}\n\n{reference}"
    return (_fenced(skeleton_text, lang, f"{shown} (your starting point)")
            + f'\n??? warning course-solution "Reference solution: {what} (try it yourself first)"\n\n'
            + _indent(folded) + "\n")


# --------------------------------------------------------------------------------------------
# ::tree


def tree_status(n: int) -> tuple[list[str], set[str], set[str]]:
    """(all paths of the reference tree at chapter n, new in n, modified in n)."""
    chapters = course_tree.all_chapters()
    this = [c for c in chapters if c.number == n]
    if not this:
        known = ", ".join(str(c.number) for c in chapters) or "none"
        raise DirectiveError(f"chapter {n} has no folder under solutions/ (chapters: {known})")
    paths = sorted(course_tree.reference_files(n))
    earlier: set[str] = set()
    for c in chapters:
        if c.number < n:
            earlier.update(course_tree.chapter_files(c.solution_dir))
    mine = set(course_tree.chapter_files(this[0].solution_dir))
    return paths, mine - earlier, mine & earlier


def _draw(paths: list[str], marks: dict[str, str]) -> list[str]:
    """Draw paths as a tree (folders first, then files, each alphabetically)."""
    root: dict = {}
    for p in paths:
        node = root
        parts = p.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part + "/", {})
        node[parts[-1]] = p  # leaf: the full path

    out = ["."]

    def walk(node: dict, prefix: str) -> None:
        keys = sorted(node, key=lambda k: (not isinstance(node[k], dict), k))
        for i, key in enumerate(keys):
            last = i == len(keys) - 1
            branch = "└── " if last else "├── "
            child = node[key]
            if isinstance(child, dict):
                out.append(prefix + branch + key)
                walk(child, prefix + ("    " if last else "│   "))
            else:
                mark = marks.get(child, "")
                out.append(prefix + branch + key + (f"  ({mark})" if mark else ""))

    walk(root, "")
    return out


def render_tree(n: int) -> str:
    paths, new, modified = tree_status(n)
    marks = {p: "new" for p in new} | {p: "modified" for p in modified}
    body = "\n".join(_draw(paths, marks))
    counts = (
        f"**{len(paths)}** {'file' if len(paths) == 1 else 'files'} in total · "
        f"**{len(new)}** new in chapter {n} · **{len(modified)}** modified in chapter {n}"
    )
    return f'```text title="the package at the end of chapter {n}"\n{body}\n```\n\n{counts}\n{{ .course-tree-counts }}\n'


# --------------------------------------------------------------------------------------------
# ::output


def render_output(slug: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", slug):
        raise DirectiveError(f"bad output name {slug!r} (expected a chapter slug like ch10_chunked_prefill)")
    rel = f"{OUTPUTS_DIR}/{slug}.txt"
    path = ROOT / rel
    if not path.is_file():
        raise DirectiveError(f"{rel} is missing: run `make outputs` to generate the chapters' outputs")
    text = ANSI.sub("", path.read_text(encoding="utf-8")).rstrip() + "\n"
    fence = _fence_for(text)
    return f'{fence}text title="output of {slug}/main.py"\n{text}{fence}\n'


# --------------------------------------------------------------------------------------------
# ::problems


PRACTICE_DIR = "practice"  # where the generated problem pages live in the site (docs-relative)
PRACTICE_TIME_LIMIT = 10  # seconds for one Run/Submit in the browser (Pyodide's startup not counted)


def _judge():
    """practice/judge.py, loaded as a module (Problem, all_problems, load)."""
    import importlib.util

    if "practice_judge" in sys.modules:
        return sys.modules["practice_judge"]
    spec = importlib.util.spec_from_file_location("practice_judge", ROOT / "practice" / "judge.py")
    judge = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = judge  # dataclasses look their module up there
    try:
        spec.loader.exec_module(judge)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return judge


def _problems() -> list:
    try:
        return _judge().all_problems()
    except (ValueError, KeyError) as e:
        raise DirectiveError(f"a practice problem is malformed: {e}") from e


def render_problems(chapter: int | None = None, page_dir: str = PRACTICE_DIR) -> str:
    """A table of the practice problems (all, or one chapter's), read from practice/problems/.

    Each title links to the problem's generated page (relative to `page_dir`, the docs folder of the
    page that holds the table); practice.js fills the first column with solved marks (localStorage)
    and gives the `.practice-index` block its chapter/difficulty filters.
    """
    import posixpath

    problems = [p for p in _problems() if chapter is None or p.chapter == chapter]
    if not problems:
        return "_No practice problems for this chapter yet._\n"
    rows = ["| | problem | chapter | difficulty | judge it locally |", "|---|---|---|---|---|"]
    for p in problems:
        link = posixpath.relpath(f"{PRACTICE_DIR}/{p.id}.md", page_dir or ".")
        mark = f'<span class="practice-solved" data-problem="{p.id}" title="solved"></span>'
        rows.append(f"| {mark} | [{p.title}]({link}) | {p.chapter} | {p.difficulty} "
                    f"| `python practice/judge.py start {p.id}` |")
    table = "\n".join(rows)
    return f'<div class="practice-index" markdown>\n\n{table}\n\n</div>\n'


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join((prefix + line) if line.strip() else "" for line in text.splitlines())


def _chapter_page(number: int) -> str | None:
    """chapters/chNN_slug.md (docs-relative) of a chapter's page, None while it has none."""
    found = sorted((ROOT / "docs" / "chapters").glob(f"ch{number:02d}_*.md"))
    return f"chapters/{found[0].name}" if found else None


def problem_page(problem) -> str:
    """The markdown of one problem's page: statement, the browser judge, the explanation folded."""
    import base64
    import json

    data = {
        "id": problem.id,
        "title": problem.title,
        "starter": problem.source("starter.py"),
        "tests": problem.source("tests.py"),
        "runner": (ROOT / "practice" / "runner.py").read_text(encoding="utf-8"),
        "timeLimit": PRACTICE_TIME_LIMIT,
    }
    # base64: nothing in the sources can close the <script> element or be touched by markdown.
    payload = base64.b64encode(json.dumps(data).encode("utf-8")).decode("ascii")
    tags = "".join(f" · `{t}`" for t in problem.tags)
    chapter_page = _chapter_page(problem.chapter)
    chapter_link = f" · [Chapter {problem.chapter}](../{chapter_page})" if chapter_page else ""
    explanation = problem.explanation or "_No explanation yet._"
    title = json.dumps(problem.title)
    return f"""---
title: {title}
---

[← All problems](index.md){chapter_link}
{{ .practice-back }}

# {problem.title}

<p class="practice-meta">Chapter {problem.chapter} · <span class="practice-difficulty practice-{problem.difficulty}">{problem.difficulty}</span> <span class="practice-solved" data-problem="{problem.id}" title="solved"></span></p>

{problem.statement}

## Your solution

<div class="practice-judge" data-problem="{problem.id}">
<div class="practice-editor"><textarea class="practice-code" spellcheck="false" aria-label="your solution"></textarea></div>
<div class="practice-buttons">
<button type="button" class="md-button md-button--primary practice-run" title="run the example tests (Ctrl+Enter)">Run</button>
<button type="button" class="md-button md-button--primary practice-submit" title="run every test (Ctrl+Shift+Enter)">Submit</button>
<button type="button" class="md-button practice-reset" title="put the starter code back">Reset</button>
<span class="practice-status" role="status">Python starts when you first run your code.</span>
</div>
<div class="practice-results" aria-live="polite"></div>
</div>
<script type="application/json" class="practice-data">{payload}</script>

**Run** checks the example tests, **Submit** every test. Your code runs in your browser (Pyodide,
served by this site) and is saved in this browser as you type. Tags: {tags.removeprefix(" · ") or "none"}.
Locally: `python practice/judge.py start {problem.id}`, then `python practice/judge.py {problem.id}`.

??? note "Explanation"

{_indent(explanation)}
"""


# --------------------------------------------------------------------------------------------
# page expansion


def expand_directive(name: str, args: list[str], page_dir: str = PRACTICE_DIR) -> str:
    if name == "code":
        if len(args) not in (1, 2):
            raise DirectiveError("usage: ::code solutions/<slug>/<path> [Symbol.qualname]")
        return render_code(args[0], args[1] if len(args) == 2 else None)
    if name == "tree":
        if len(args) != 1 or not args[0].isdigit():
            raise DirectiveError("usage: ::tree N   (N = chapter number)")
        return render_tree(int(args[0]))
    if name == "output":
        if len(args) != 1:
            raise DirectiveError("usage: ::output <chapter slug>")
        return render_output(args[0])
    if name == "problems":
        if len(args) > 1 or (args and not args[0].isdigit()):
            raise DirectiveError("usage: ::problems [chapter number]")
        return render_problems(int(args[0]) if args else None, page_dir)
    raise DirectiveError(f"unknown directive ::{name} (known: ::code, ::tree, ::output, ::problems)")


def expand_markdown(markdown: str, where: str = "<page>", page_dir: str = PRACTICE_DIR) -> str:
    """Expand every directive line of a page (outside fenced code); page_dir: the page's docs folder."""
    out: list[str] = []
    fence: str | None = None  # the opening fence while inside a code block
    for lineno, line in enumerate(markdown.splitlines(keepends=True), 1):
        stripped = line.rstrip("\r\n")
        if fence is not None:
            s = stripped.strip()
            if s.startswith(fence[0]) and set(s) == {fence[0]} and len(s) >= len(fence):
                fence = None
            out.append(line)
            continue
        m = FENCE_OPEN.match(stripped)
        if m:
            fence = m.group(1)
            out.append(line)
            continue
        d = DIRECTIVE.match(stripped)
        if not d:
            out.append(line)
            continue
        indent = d.group("indent")
        try:
            block = expand_directive(d.group("name"), d.group("args").split(), page_dir)
        except DirectiveError as exc:
            raise PluginError(f"{where}:{lineno}: {stripped.strip()}\n    {exc}") from None
        block_lines = block.rstrip("\n").split("\n")
        out.append("\n".join((indent + b) if b else b for b in block_lines) + "\n")
    return "".join(out)


# --------------------------------------------------------------------------------------------
# mkdocs events


def on_config(config, **kwargs):
    """Bundle mermaid/KaTeX from npm if docs/assets/vendor/ is missing or stale (fast when done)."""
    from tools import vendor_assets

    try:
        if vendor_assets.ensure(quiet=False):
            log.info("course: vendored docs assets into docs/assets/vendor/")
    except vendor_assets.VendorError as exc:
        raise PluginError(f"course: cannot bundle the docs assets (mermaid, KaTeX, Pyodide, CodeMirror):\n{exc}") from None
    return config


def on_files(files, config, **kwargs):
    """One generated page per practice problem: practice/<id>.md (on_nav puts them under Practice)."""
    from mkdocs.structure.files import File, InclusionLevel

    try:
        problems = _problems()
    except DirectiveError as exc:
        raise PluginError(f"course: {exc}") from None
    for p in problems:
        uri = f"{PRACTICE_DIR}/{p.id}.md"
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"course: docs/{uri} exists, but the hook generates it from practice/problems/{p.id}/")
        files.append(File.generated(config, uri, content=problem_page(p), inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def _stage_page_as_index(section) -> None:
    """A stage page (stages/*.md) is its section's index: the section title links to it and the sidebar
    does not list the stage a second time under its own name (navigation.indexes only knows index.md)."""
    from mkdocs.structure.pages import Page

    first = section.children[0] if section.children else None
    if isinstance(first, Page) and first.file.src_uri.startswith("stages/") and not first.is_index:
        first.__class__ = type("StageIndexPage", (type(first),), {"is_index": property(lambda self: True)})


def _add_problem_pages(nav, files) -> None:
    """Practice becomes a section: its index, then one subsection per chapter with its problem pages, so a
    problem page has the site navigation and previous/next links like any other page."""
    from mkdocs.structure.nav import Section, _add_previous_and_next_links

    index = next((p for p in nav.pages if p.file.src_uri == f"{PRACTICE_DIR}/index.md"), None)
    if index is None:
        return
    practice = index.parent
    if practice is None:  # `Practice: practice/index.md`: wrap the page in a section of that name
        practice = Section(index.title or "Practice", [index])
        nav.items[nav.items.index(index)] = practice
        index.parent = practice
    by_chapter: dict[int, list] = {}
    for problem in _problems():
        page = files.get_file_from_path(f"{PRACTICE_DIR}/{problem.id}.md").page
        by_chapter.setdefault(problem.chapter, []).append(page)
    for number, pages in sorted(by_chapter.items()):
        section = Section(f"Chapter {number}", pages)
        section.parent = practice
        for page in pages:
            page.parent = section
        practice.children.append(section)
    after = nav.pages.index(index) + 1
    nav.pages[after:after] = [page for _, pages in sorted(by_chapter.items()) for page in pages]
    _add_previous_and_next_links(nav.pages)


def on_nav(nav, config, files, **kwargs):
    from mkdocs.structure.nav import Section

    for item in nav.items:
        if isinstance(item, Section):
            _stage_page_as_index(item)
    _add_problem_pages(nav, files)
    return nav


def on_page_markdown(markdown, page, config, files, **kwargs):
    import posixpath

    where = f"docs/{page.file.src_uri}"
    return expand_markdown(markdown, where=where, page_dir=posixpath.dirname(page.file.src_uri))


def on_serve(server, config, builder, **kwargs):
    """`mkdocs serve`: rebuild when reference code or outputs change."""
    for folder in (ROOT / "solutions", ROOT / "practice" / "problems", ROOT / "practice" / "runner.py"):
        if folder.is_dir():
            server.watch(str(folder))
    return server
