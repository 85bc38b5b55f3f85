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
    ::glossary                                    the glossary (docs/glossary.yml): a table per topic

Two languages (mkdocs-static-i18n builds English at / and Chinese at /zh/): on a Chinese page
(`*.zh.md`) every label the hook writes is Chinese, the problem tables and pages take their text from
`problem.zh.md`, and each heading gets the id of its English twin's heading (tools/i18n.py), so an anchor
such as `#run-it` names the same section in both languages.

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
import os
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

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


# Every label the hook writes into a page, per language (the page's language: `zh` for `*.zh.md`).
STRINGS = {
    "en": {
        "starting point": "{path} (your starting point)",
        "reference title": "Reference solution: {what} (try it yourself first)",
        "reference warning": ("This is the answer to the exercise ({todo}). Write your own version in `{file}` "
                              "first, pass `make check CH={n}`, then compare."),
        "tree title": "the package at the end of chapter {n}",
        "tree counts": ("**{total}** {files} in total · **{new}** new in chapter {n} · "
                        "**{modified}** modified in chapter {n}"),
        "file": "file", "files": "files",
        "output title": "output of {slug}/main.py",
        "no problems": "_No practice problems for this chapter yet._",
        "col problem": "problem", "col chapter": "chapter", "col difficulty": "difficulty",
        "col local": "judge it locally",
        "easy": "easy", "medium": "medium", "hard": "hard",
        "solved": "solved",
        "all problems": "← All problems", "chapter": "Chapter {n}",
        "your solution": "Your solution", "editor label": "your solution",
        "run": "Run", "submit": "Submit", "reset": "Reset",
        "run tip": "run the example tests (Ctrl+Enter)", "submit tip": "run every test (Ctrl+Shift+Enter)",
        "reset tip": "put the starter code back",
        "status": "Python starts when you first run your code.",
        "how": ("**Run** checks the example tests, **Submit** every test. Your code runs in your browser "
                "(Pyodide,\nserved by this site) and is saved in this browser as you type. Tags: {tags}.\n"
                "Locally: `python practice/judge.py start {id}`, then `python practice/judge.py {id}`."),
        "no tags": "none",
        "explanation": "Explanation", "no explanation": "_No explanation yet._",
        "glossary head": "| English | 中文 | other Chinese renderings | meaning |",
        "permalink": "Permanent link",
    },
    "zh": {
        "starting point": "{path}（你的起点）",
        "reference title": "参考实现：{what}（先自己动手写）",
        "reference warning": ("这是练习的答案（{todo}）。请先在 `{file}` 里写出你自己的版本，"
                              "通过 `make check CH={n}` 之后再来对照。"),
        "tree title": "第 {n} 章结束时的包",
        "tree counts": "共 **{total}** 个文件 · 第 {n} 章新增 **{new}** 个 · 第 {n} 章修改 **{modified}** 个",
        "file": "文件", "files": "文件",
        "output title": "{slug}/main.py 的输出",
        "no problems": "_本章暂时还没有练习题。_",
        "col problem": "题目", "col chapter": "章", "col difficulty": "难度", "col local": "本地评测",
        "easy": "简单", "medium": "中等", "hard": "困难",
        "solved": "已通过",
        "all problems": "← 全部练习题", "chapter": "第 {n} 章",
        "your solution": "你的解答", "editor label": "你的解答",
        "run": "运行", "submit": "提交", "reset": "重置",
        "run tip": "运行示例测试（Ctrl+Enter）", "submit tip": "运行全部测试（Ctrl+Shift+Enter）",
        "reset tip": "恢复初始代码",
        "status": "第一次运行代码时才会启动 Python。",
        "how": ("**运行** 只跑示例测试，**提交** 跑全部测试。代码在你的浏览器里执行（Pyodide，由本站自己提供），"
                "边写边保存在这个浏览器里。标签：{tags}。\n"
                "本地评测：先 `python practice/judge.py start {id}`，再 `python practice/judge.py {id}`。"),
        "no tags": "无",
        "explanation": "讲解", "no explanation": "_暂无讲解。_",
        "glossary head": "| 中文 | English | 别处常见的译法 | 含义 |",
        "permalink": "永久链接",
    },
}
LANGUAGES = tuple(STRINGS)


def say(lang: str, key: str, **fields) -> str:
    return STRINGS[lang][key].format(**fields)


def page_language(src_uri: str) -> str:
    """`zh` for a Chinese page (`x.zh.md`), else `en`."""
    return next((lang for lang in LANGUAGES if lang != "en" and src_uri.endswith(f".{lang}.md")), "en")


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


def render_code(rel: str, symbol: str | None = None, lang: str = "en") -> str:
    """Given code: one open block. Code with a TODO stub: the learner's skeleton open, the reference folded."""
    code_lang = LANGS.get(Path(rel).suffix, "text")
    shown = _display_path(rel)
    reference = _fenced(extract_code(rel, symbol), code_lang, shown)
    skeleton = extract_skeleton(rel, symbol) if code_lang == "python" else None
    if skeleton is None:
        return reference
    skeleton_text, stubs = skeleton
    todo = ", ".join(f"`{name}`" for name in stubs)
    warning = say(lang, "reference warning", todo=todo, file="chapters/" + rel.removeprefix("solutions/"),
                  n=int(_chapter_of(rel)[2:]))
    folded = f"{warning}\n\n{reference}"
    title = say(lang, "reference title", what=symbol or shown)
    return (_fenced(skeleton_text, code_lang, say(lang, "starting point", path=shown))
            + f'\n??? warning course-solution "{title}"\n\n'
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


def render_tree(n: int, lang: str = "en") -> str:
    paths, new, modified = tree_status(n)
    marks = {p: "new" for p in new} | {p: "modified" for p in modified}
    body = "\n".join(_draw(paths, marks))
    counts = say(lang, "tree counts", total=len(paths), files=say(lang, "file" if len(paths) == 1 else "files"),
                 new=len(new), modified=len(modified), n=n)
    title = say(lang, "tree title", n=n)
    return f'```text title="{title}"\n{body}\n```\n\n{counts}\n{{ .course-tree-counts }}\n'


# --------------------------------------------------------------------------------------------
# ::output


def render_output(slug: str, lang: str = "en") -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", slug):
        raise DirectiveError(f"bad output name {slug!r} (expected a chapter slug like ch10_chunked_prefill)")
    rel = f"{OUTPUTS_DIR}/{slug}.txt"
    path = ROOT / rel
    if not path.is_file():
        raise DirectiveError(f"{rel} is missing: run `make outputs` to generate the chapters' outputs")
    text = ANSI.sub("", path.read_text(encoding="utf-8")).rstrip() + "\n"
    fence = _fence_for(text)
    block = f'{fence}text title="{say(lang, "output title", slug=slug)}"\n{text}{fence}\n'
    return f'<div class="course-output" markdown>\n\n{block}\n</div>\n'


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


def render_problems(chapter: int | None = None, page_dir: str = PRACTICE_DIR, lang: str = "en") -> str:
    """A table of the practice problems (all, or one chapter's), read from practice/problems/.

    Each title links to the problem's generated page (relative to `page_dir`, the docs folder of the
    page that holds the table) and carries its solved mark (practice.js fills it from localStorage); the
    header cells name their column for practice.js (`data-col`), which gives the `.practice-index`
    block its chapter/difficulty filters in either language.
    """
    import posixpath

    problems = [p for p in _problems() if chapter is None or p.chapter == chapter]
    if not problems:
        return say(lang, "no problems") + "\n"
    head = " | ".join(f'<span data-col="{col}">{say(lang, "col " + col)}</span>'
                      for col in ("problem", "chapter", "difficulty", "local"))
    rows = [f"| {head} |", "|---|---|---|---|"]
    for p in problems:
        shown = p.localized(lang)
        link = posixpath.relpath(f"{PRACTICE_DIR}/{p.id}.md", page_dir or ".")
        mark = f'<span class="practice-solved" data-problem="{p.id}" title="{say(lang, "solved")}"></span>'
        level = f'<span data-difficulty="{p.difficulty}">{say(lang, p.difficulty)}</span>'
        rows.append(f"| [{shown.title}]({link}) {mark} | {p.chapter} | {level} "
                    f"| `python practice/judge.py start {p.id}` |")
    table = "\n".join(rows)
    return f'<div class="practice-index" markdown>\n\n{table}\n\n</div>\n'


# --------------------------------------------------------------------------------------------
# ::glossary


def render_glossary(lang: str = "en") -> str:
    """The glossary (docs/glossary.yml): one table per topic, under a heading that has the topic's id in both
    languages. English pages lead with the English term, Chinese ones with the Chinese; a third column lists
    the renderings a reader meets in other Chinese material."""
    from tools import i18n

    def cell(text) -> str:
        return str(text).replace("|", "\\|")

    out = []
    for topic in i18n.glossary_topics():
        rows = [say(lang, "glossary head"), "|---|---|---|---|"]
        for e in topic["terms"]:
            others = "、".join(map(str, e["others"])) or "—"
            cells = ((e["en"], e["zh"], others, e["en_note"]) if lang == "en"
                     else (e["zh"], e["en"], others, e["zh_note"]))
            rows.append("| " + " | ".join(map(cell, cells)) + " |")
        out.append(f"## {topic[lang]} {{ #{topic['id']} }}\n\n" + "\n".join(rows))
    return '<div class="course-glossary" markdown>\n\n' + "\n\n".join(out) + "\n\n</div>\n"


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join((prefix + line) if line.strip() else "" for line in text.splitlines())


def _chapter_page(number: int) -> str | None:
    """chapters/chNN_slug.md (docs-relative) of a chapter's page, None while it has none."""
    found = sorted((ROOT / "docs" / "chapters").glob(f"ch{number:02d}_*.md"))
    return f"chapters/{found[0].name}" if found else None


def problem_page(problem, lang: str = "en") -> str:
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
    shown = problem.localized(lang)
    tags = " · ".join(f"`{t}`" for t in problem.tags) or say(lang, "no tags")
    chapter_page = _chapter_page(problem.chapter)
    chapter = say(lang, "chapter", n=problem.chapter)
    chapter_link = f" · [{chapter}](../{chapter_page})" if chapter_page else ""
    explanation = shown.explanation or say(lang, "no explanation")
    s = {k: say(lang, k) for k in ("run", "submit", "reset", "run tip", "submit tip", "reset tip", "status",
                                    "editor label", "solved", "your solution", "explanation", "all problems")}
    return f"""---
title: {json.dumps(shown.title)}
---

[{s["all problems"]}](index.md){chapter_link}
{{ .practice-back }}

# {shown.title}

<p class="practice-meta">{chapter} · <span class="practice-difficulty practice-{problem.difficulty}">{say(lang, problem.difficulty)}</span> <span class="practice-solved" data-problem="{problem.id}" title="{s["solved"]}"></span></p>

{shown.statement}

## {s["your solution"]} {{ #your-solution }}

<div class="practice-judge" data-problem="{problem.id}">
<div class="practice-editor"><textarea class="practice-code" spellcheck="false" aria-label="{s["editor label"]}"></textarea></div>
<div class="practice-buttons">
<button type="button" class="md-button md-button--primary practice-run" title="{s["run tip"]}">{s["run"]}</button>
<button type="button" class="md-button md-button--primary practice-submit" title="{s["submit tip"]}">{s["submit"]}</button>
<button type="button" class="md-button practice-reset" title="{s["reset tip"]}">{s["reset"]}</button>
<span class="practice-status" role="status">{s["status"]}</span>
</div>
<div class="practice-results" aria-live="polite"></div>
</div>
<script type="application/json" class="practice-data">{payload}</script>

{say(lang, "how", tags=tags, id=problem.id)}

??? note "{s["explanation"]}"

{_indent(explanation)}
"""


# --------------------------------------------------------------------------------------------
# page expansion


def expand_directive(name: str, args: list[str], page_dir: str = PRACTICE_DIR, lang: str = "en") -> str:
    if name == "code":
        if len(args) not in (1, 2):
            raise DirectiveError("usage: ::code solutions/<slug>/<path> [Symbol.qualname]")
        return render_code(args[0], args[1] if len(args) == 2 else None, lang)
    if name == "tree":
        if len(args) != 1 or not args[0].isdigit():
            raise DirectiveError("usage: ::tree N   (N = chapter number)")
        return render_tree(int(args[0]), lang)
    if name == "output":
        if len(args) != 1:
            raise DirectiveError("usage: ::output <chapter slug>")
        return render_output(args[0], lang)
    if name == "problems":
        if len(args) > 1 or (args and not args[0].isdigit()):
            raise DirectiveError("usage: ::problems [chapter number]")
        return render_problems(int(args[0]) if args else None, page_dir, lang)
    if name == "glossary":
        if args:
            raise DirectiveError("usage: ::glossary")
        return render_glossary(lang)
    raise DirectiveError(f"unknown directive ::{name} (known: ::code, ::tree, ::output, ::problems, ::glossary)")


def expand_markdown(markdown: str, where: str = "<page>", page_dir: str = PRACTICE_DIR, lang: str = "en") -> str:
    """Expand every directive line of a page (outside fenced code); page_dir: the page's docs folder,
    lang: the page's language (the labels the directives write)."""
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
            block = expand_directive(d.group("name"), d.group("args").split(), page_dir, lang)
        except DirectiveError as exc:
            raise PluginError(f"{where}:{lineno}: {stripped.strip()}\n    {exc}") from None
        block_lines = block.rstrip("\n").split("\n")
        out.append("\n".join((indent + b) if b else b for b in block_lines) + "\n")
    return "".join(out)


# --------------------------------------------------------------------------------------------
# mkdocs events


def _build_language(config) -> str:
    """The language being built: mkdocs-static-i18n builds each one in turn and sets the theme's language."""
    lang = config.theme.get("language") or "en"
    return lang if lang in LANGUAGES else "en"


JIEBA_WORDS = ROOT / "build" / "jieba-words.txt"


def _jieba_words(config) -> None:
    """Give jieba (Material's Chinese search segmentation) the glossary's Chinese terms as words, so a search
    for 分块 or 基数树 finds its pages: without them jieba may cut a term into pieces no query matches. The
    renderings other material uses (推测解码, KV 缓存) are words too: a search for one finds the glossary."""
    from tools import i18n

    search = config.plugins.get("material/search") or config.plugins.get("search")
    if search is None or "jieba_dict_user" not in search.config:
        return
    words: list[str] = []
    for entry in i18n.glossary():
        for part in re.split(r"[/（）()、：\s]", " ".join(map(str, [entry["zh"], *entry["others"]]))):
            part = part.strip()
            if re.search(r"[\u4e00-\u9fff]", part) and part not in words:
                words.append(part)
    JIEBA_WORDS.parent.mkdir(exist_ok=True)
    text = "".join(f"{w} 100000\n" for w in words)
    if not JIEBA_WORDS.is_file() or JIEBA_WORDS.read_text(encoding="utf-8") != text:
        JIEBA_WORDS.write_text(text, encoding="utf-8")
    search.config.jieba_dict_user = str(JIEBA_WORDS)


@event_priority(100)  # before the search plugin reads its jieba word list
def on_config(config, **kwargs):
    """Bundle mermaid/KaTeX from npm if docs/assets/vendor/ is missing or stale (fast when done)."""
    from tools import vendor_assets

    try:
        if vendor_assets.ensure(quiet=False):
            log.info("course: vendored docs assets into docs/assets/vendor/")
    except vendor_assets.VendorError as exc:
        raise PluginError(f"course: cannot bundle the docs assets (mermaid, KaTeX, Pyodide, CodeMirror):\n{exc}") from None
    _jieba_words(config)
    # "Edit this page" links where the site knows its repository (the pages workflow sets COURSE_REPO_URL).
    repo = os.environ.get("COURSE_REPO_URL", "").rstrip("/")
    if repo:
        config.repo_url = repo
        config.edit_uri = "edit/main/docs/"
    return config


def _problem_file(config, problem, lang: str, content: str | None):
    """The generated page of one problem in one language, with what mkdocs-static-i18n gives the pages it
    reconfigures (its language and its twins), so the language switcher leads to the same problem."""
    from mkdocs.structure.files import File, InclusionLevel

    uri = f"{PRACTICE_DIR}/{problem.id}.md" if lang == "en" else f"{PRACTICE_DIR}/{problem.id}.{lang}.md"
    f = File.generated(config, uri, content=content if content is not None else "", inclusion=InclusionLevel.NOT_IN_NAV)
    f.dest_uri = (f"{PRACTICE_DIR}/{problem.id}/index.html" if lang == "en"
                  else f"{lang}/{PRACTICE_DIR}/{problem.id}/index.html")
    f.locale = f.locale_alternate_of = lang
    f.localization = None if lang == "en" else lang
    f.norm_src_uri = f"{PRACTICE_DIR}/{problem.id}.md"
    return f


@event_priority(-200)  # after mkdocs-static-i18n (-100) has picked each page's language
def on_files(files, config, **kwargs):
    """One generated page per practice problem in the language being built: practice/<id>.md, or
    practice/<id>.zh.md at zh/practice/<id>/ (on_nav puts them under Practice)."""
    lang = _build_language(config)
    try:
        problems = _problems()
    except DirectiveError as exc:
        raise PluginError(f"course: {exc}") from None
    for p in problems:
        for name in (f"{PRACTICE_DIR}/{p.id}.md", f"{PRACTICE_DIR}/{p.id}.{lang}.md"):
            if files.src_uris.get(name) is not None:
                raise PluginError(f"course: docs/{name} exists, but the hook generates it from practice/problems/{p.id}/")
        page = _problem_file(config, p, lang, problem_page(p, lang))
        page.alternates = {other: page if other == lang else _problem_file(config, p, other, None)
                           for other in LANGUAGES}
        files.append(page)
    return files


def _stage_page_as_index(section) -> None:
    """A stage page (stages/*.md) is its section's index: the section title links to it and the sidebar
    does not list the stage a second time under its own name (navigation.indexes only knows index.md)."""
    from mkdocs.structure.pages import Page

    first = section.children[0] if section.children else None
    if isinstance(first, Page) and first.file.src_uri.startswith("stages/") and not first.is_index:
        first.__class__ = type("StageIndexPage", (type(first),), {"is_index": property(lambda self: True)})


def _add_problem_pages(nav, files, lang: str) -> None:
    """Practice becomes a section: its index, then one subsection per chapter with its problem pages, so a
    problem page has the site navigation and previous/next links like any other page."""
    from mkdocs.structure.nav import Section, _add_previous_and_next_links

    index = next((p for p in nav.pages if p.file.src_uri in (f"{PRACTICE_DIR}/index.md",
                                                              f"{PRACTICE_DIR}/index.{lang}.md")), None)
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
        section = Section(say(lang, "chapter", n=number), pages)
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
    _add_problem_pages(nav, files, _build_language(config))
    return nav


def _english_twin(src_uri: str, lang: str) -> str | None:
    """The markdown of the English page a translated page pairs with: its file, or for a generated problem
    page the English page the hook generates (None if there is none)."""
    stem = src_uri[: -len(f".{lang}.md")]
    english = ROOT / "docs" / (stem + ".md")
    if english.is_file():
        return english.read_text(encoding="utf-8")
    problem = next((p for p in _problems() if f"{PRACTICE_DIR}/{p.id}" == stem), None)
    return problem_page(problem, "en") if problem is not None else None


CJK = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
CJK_BREAK = re.compile(rf"(?<=[{CJK}])[ \t]*\n[ \t]*(?=[{CJK}])")


def join_cjk_lines(markdown: str) -> str:
    """Join a paragraph's lines where both sides of the break are Chinese: a browser shows a line break
    inside a paragraph as a space, which Chinese text does not have. Code blocks are left alone, and a
    line that starts with a Chinese character never starts a block (list, table, heading, admonition)."""
    out, prose = [], []
    for block in i18n_blocks(markdown):
        if isinstance(block, str):
            prose.append(block)
            continue
        if prose:
            out.append(CJK_BREAK.sub("", "\n".join(prose)))
            prose = []
        out.append(block[0])
    if prose:
        out.append(CJK_BREAK.sub("", "\n".join(prose)))
    return "\n".join(out) + ("\n" if markdown.endswith("\n") else "")


def i18n_blocks(markdown: str):
    from tools import i18n

    return i18n._split_blocks_keep(markdown)


def on_page_markdown(markdown, page, config, files, **kwargs):
    import posixpath

    from tools import i18n

    src = page.file.src_uri
    lang = page_language(src)
    where = f"docs/{src}"
    if lang != "en":
        markdown = i18n.STAMP.sub("", markdown, count=1).lstrip("\n")  # metadata, and the H1 must come first
        if (english := _english_twin(src, lang)) is not None:
            markdown = i18n.with_english_ids(markdown, english)
        markdown = join_cjk_lines(markdown)
    return expand_markdown(markdown, where=where, page_dir=posixpath.dirname(src), lang=lang)


TABLE_CODE = re.compile(r"(<td[^>]*>)(.*?)(</td>)", re.S)
CODE_SPAN = re.compile(r"(<code>)([^<]*)(</code>)")
PLOT = re.compile(r'(?<!">)<img (?P<attrs>[^>]*?)src="(?P<src>[^"]+\.png)"(?P<rest>[^>]*)>')


def _breakable(cell: re.Match) -> str:
    """A table cell whose code may break after / . _ only (a <wbr>), never in the middle of a word."""
    def wbr(code: re.Match) -> str:
        return code.group(1) + re.sub(r"([/._])(?=\w)", r"\1<wbr>", code.group(2)) + code.group(3)

    return cell.group(1) + CODE_SPAN.sub(wbr, cell.group(2)) + cell.group(3)


def _permalink_title(config) -> str:
    """The title the toc extension gives each heading's anchor link (the same in every language)."""
    toc = (config.get("mdx_configs") or {}).get("toc") or {}
    return toc.get("permalink_title", "Permanent link")


def on_page_content(html, page, config, files, **kwargs):
    """Identifiers in table cells break at / . _ only; a plot (a PNG image) links to itself, full size; a
    heading's anchor link is titled in the page's language."""
    html = TABLE_CODE.sub(_breakable, html)
    lang = page_language(page.file.src_uri)
    if lang != "en":
        anchor = re.compile(r'(class="headerlink" href="#[^"]*" title=)"' + re.escape(_permalink_title(config)) + '"')
        html = anchor.sub(lambda m: f'{m.group(1)}"{say(lang, "permalink")}"', html)
    return PLOT.sub(lambda m: f'<a class="course-plot" href="{m.group("src")}">{m.group(0)}</a>', html)


HEAD_ALTERNATE = re.compile(r'\s*<link rel="alternate" href="[^"]*" hreflang="[^"]*">')


SWITCH_LINK = re.compile(r'(<a href=")(/[^"]*)(" hreflang="[^"]*" class="md-select__link">)')


def on_post_page(output, page, config, **kwargs):
    """Drop the theme's <link rel="alternate" hreflang> tags: with a language switcher that links each page's
    twin (mkdocs-static-i18n), Material's script would fetch <that page>/sitemap.xml, which does not exist
    (a 404 on every page). The switcher's own links and the sitemap's alternates stay; the ones that are
    absolute (a home page's: "/", "/zh/") become relative, so the site works under any path (a project's
    GitHub Pages site lives under /<repository>/)."""
    import posixpath

    here = posixpath.dirname(page.file.dest_uri)

    def relative(m: re.Match) -> str:
        target = posixpath.relpath(m.group(2).strip("/") or ".", here or ".")
        return m.group(1) + ("./" if target == "." else target + "/") + m.group(3)

    return SWITCH_LINK.sub(relative, HEAD_ALTERNATE.sub("", output))


def on_serve(server, config, builder, **kwargs):
    """`mkdocs serve`: rebuild when reference code or outputs change."""
    for folder in (ROOT / "solutions", ROOT / "practice" / "problems", ROOT / "practice" / "runner.py",
                   ROOT / "docs" / "glossary.yml"):
        if folder.exists():
            server.watch(str(folder))
    return server
