"""Unit tests of the book's directive expansion (docs/hooks/course.py), on fixture files.

The hook's roots are monkeypatched to a temporary repository, so these tests do not depend on
the real solutions/ (CPU, fast, no mkdocs build).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import tree as course_tree  # noqa: E402


def _load_hook():
    spec = importlib.util.spec_from_file_location("course_docs_hook", ROOT / "docs" / "hooks" / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _load_hook()
DirectiveError = hook.DirectiveError

CORE_V1 = '''\
"""Core data structures."""
import dataclasses

PAGE_SIZE = 16
MAX_LEN: int = 4096
A, B = 1, 2


def helper(x):
    # TODO(ch01): double it.
    # >>> solution
    return 2 * x
    # <<< solution


@dataclasses.dataclass
class Req:
    """A request."""

    uid: int
    LIMIT = 3

    @property
    def length(self) -> int:
        # TODO(ch01): the uid.
        # >>> solution
        return self.uid
        # <<< solution

    @length.setter
    def length(self, value: int) -> None:
        self.uid = value

    def complete_one(self) -> None:
        text = """
not indented
"""
        return None
'''

CORE_V2 = CORE_V1 + '''

class Batch:
    def size(self) -> int:
        return 0
'''


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    sol = tmp_path / "solutions"
    _write(sol / "ch00_tiny_engine" / "tiny_engine.py", "def main():\n    pass\n")
    _write(sol / "ch00_tiny_engine" / "main.py", "print('chapter-only file, not in the tree')\n")
    _write(sol / "ch01_core" / "minisgl" / "__init__.py", "")
    _write(sol / "ch01_core" / "minisgl" / "core.py", CORE_V1)
    _write(sol / "ch02_layers" / "minisgl" / "core.py", CORE_V2)
    _write(sol / "ch02_layers" / "minisgl" / "layers" / "__init__.py", "")
    _write(
        sol / "ch02_layers" / "minisgl" / "layers" / "norm.py",
        'DOC = """\n```python\nx = 1\n```\n"""\n\n\ndef rms_norm(x):\n    # TODO(ch02): normalise.\n    # >>> solution\n    return x\n    # <<< solution\n',
    )
    _write(sol / "ch02_layers" / "minisgl" / "bad.py", "def f(:\n")
    _write(sol / "ch02_layers" / "minisgl" / "leaky.py", "def f():\n    # >>> solution:\n    return 1\n")
    monkeypatch.setattr(hook, "ROOT", tmp_path)
    monkeypatch.setattr(course_tree, "SOLUTIONS", sol)
    return tmp_path


CORE = "solutions/ch01_core/minisgl/core.py"


# ------------------------------------------------------------------------------------- ::code


def test_function_found_and_markers_stripped(repo):
    code = hook.extract_code(CORE, "helper")
    assert code == "def helper(x):\n    # TODO(ch01): double it.\n    return 2 * x\n"


def test_class_found_with_decorator(repo):
    code = hook.extract_code(CORE, "Req")
    assert code.startswith("@dataclasses.dataclass\nclass Req:\n")
    assert code.rstrip().endswith("return None")
    assert ">>>" not in code and "<<<" not in code


def test_method_found_dedented_with_decorators_and_setter(repo):
    code = hook.extract_code(CORE, "Req.length")
    assert code == (
        "@property\ndef length(self) -> int:\n    # TODO(ch01): the uid.\n    return self.uid\n"
        "\n@length.setter\ndef length(self, value: int) -> None:\n    self.uid = value\n"
    )


def test_method_keeps_lines_less_indented_than_the_def(repo):
    code = hook.extract_code(CORE, "Req.complete_one")
    assert code.startswith("def complete_one(self) -> None:\n    text = \"\"\"\nnot indented\n\"\"\"\n")


@pytest.mark.parametrize(
    "symbol, expected",
    [("PAGE_SIZE", "PAGE_SIZE = 16\n"), ("MAX_LEN", "MAX_LEN: int = 4096\n"), ("B", "A, B = 1, 2\n"), ("Req.LIMIT", "LIMIT = 3\n")],
)
def test_assignment_found(repo, symbol, expected):
    assert hook.extract_code(CORE, symbol) == expected


def test_later_chapter_version_is_used_by_path(repo):
    assert "class Batch" in hook.extract_code("solutions/ch02_layers/minisgl/core.py", "Batch")
    with pytest.raises(DirectiveError, match="no 'Batch'"):
        hook.extract_code(CORE, "Batch")


def test_missing_symbol_raises_with_the_names_that_exist(repo):
    with pytest.raises(DirectiveError) as exc:
        hook.extract_code(CORE, "nope")
    assert "'nope'" in str(exc.value) and "helper" in str(exc.value) and "Req" in str(exc.value)


def test_missing_method_raises(repo):
    with pytest.raises(DirectiveError, match=r"no 'forward' in Req .*complete_one"):
        hook.extract_code(CORE, "Req.forward")


def test_symbol_inside_a_non_class_raises(repo):
    with pytest.raises(DirectiveError, match="not a class or function"):
        hook.extract_code(CORE, "PAGE_SIZE.real")


def test_missing_file_raises(repo):
    with pytest.raises(DirectiveError, match="file not found"):
        hook.extract_code("solutions/ch01_core/minisgl/nothere.py", "f")


def test_path_outside_repo_raises(repo):
    with pytest.raises(DirectiveError, match="outside the repository"):
        hook.extract_code("../etc/passwd")


def test_syntax_error_raises(repo):
    with pytest.raises(DirectiveError, match="does not parse"):
        hook.extract_code("solutions/ch02_layers/minisgl/bad.py", "f")


def test_malformed_marker_left_in_code_raises(repo):
    with pytest.raises(DirectiveError, match="marker"):
        hook.extract_code("solutions/ch02_layers/minisgl/leaky.py")


def test_whole_file_without_markers(repo):
    code = hook.extract_code(CORE)
    assert code.startswith('"""Core data structures."""\n')
    assert "# >>> solution" not in code and "# <<< solution" not in code
    assert code.count("\n") == CORE_V1.count("\n") - 4  # two marker pairs removed


def test_render_code_fence_and_title(repo):
    block = hook.render_code(CORE, "PAGE_SIZE")
    assert block == '```python title="minisgl/core.py"\nPAGE_SIZE = 16\n```\n'


def test_render_code_uses_a_longer_fence_when_the_code_has_one(repo):
    _write(repo / "solutions" / "ch02_layers" / "minisgl" / "doc.py", 'DOC = """\n```python\nx = 1\n```\n"""\n')
    block = hook.render_code("solutions/ch02_layers/minisgl/doc.py")
    assert block.startswith('````python title="minisgl/doc.py"\n')
    assert block.endswith("\n````\n")


# --------------------------------------------------------------------- ::code with a TODO stub


def _split_folded(block: str) -> tuple[str, str, str]:
    """(the open part, the folded block's header line, the folded body dedented) of a rendered stub."""
    head, sep, folded = block.partition("\n??? ")
    assert sep, f"no folded block in:\n{block}"
    title, _, body = folded.partition("\n")
    return head, "??? " + title, textwrap.dedent(body)


def test_stub_shows_the_skeleton_open_and_the_reference_folded(repo):
    block = hook.render_code(CORE, "helper")
    open_part, header, folded = _split_folded(block)
    assert open_part.startswith('```python title="minisgl/core.py (your starting point)"\n'), open_part
    assert 'def helper(x):\n    # TODO(ch01): double it.\n    raise NotImplementedError("TODO(ch01): helper")\n```' \
        in open_part, f"the open part is not the learner's skeleton:\n{open_part}"
    assert "return 2 * x" not in open_part, "the answer shows outside the folded block"
    assert header == '??? warning course-solution "Reference solution: helper (try it yourself first)"', header
    assert "answer" in folded and "chapters/ch01_core/minisgl/core.py" in folded and "make check CH=1" in folded, folded
    assert '```python title="minisgl/core.py"\ndef helper(x):\n    # TODO(ch01): double it.\n    return 2 * x\n```' \
        in folded, f"the folded part is not the reference:\n{folded}"


def test_class_with_a_stub_inside_is_folded_and_names_the_stub(repo):
    open_part, header, folded = _split_folded(hook.render_code(CORE, "Req"))
    assert 'raise NotImplementedError("TODO(ch01): Req.length")' in open_part
    assert "class Req:" in open_part and "def complete_one(self)" in open_part, "given methods stay in the open part"
    assert "Reference solution: Req (try it yourself first)" in header, header
    assert "`Req.length`" in folded and "return self.uid" in folded


def test_whole_file_with_a_stub_is_folded(repo):
    open_part, header, folded = _split_folded(hook.render_code("solutions/ch02_layers/minisgl/layers/norm.py"))
    assert 'raise NotImplementedError("TODO(ch02): rms_norm")' in open_part and "return x" not in open_part
    assert "Reference solution: minisgl/layers/norm.py" in header, header
    assert "    return x\n" in folded


@pytest.mark.parametrize("symbol", ["PAGE_SIZE", "Req.complete_one", "Req.LIMIT"])
def test_given_code_renders_open(repo, symbol):
    block = hook.render_code(CORE, symbol)
    assert "???" not in block and "NotImplementedError" not in block, f"{symbol} is given code, shown folded:\n{block}"
    assert block.startswith('```python title="minisgl/core.py"\n')


@pytest.mark.parametrize("symbol", ["helper", "Req", "Req.length", "Req.complete_one", None])
def test_no_marker_line_leaks(repo, symbol):
    block = hook.render_code(CORE, symbol)
    assert ">>> solution" not in block and "<<< solution" not in block, f"a marker shows for {symbol}:\n{block}"


def test_stub_without_a_todo_line_fails_the_build(repo):
    _write(repo / "solutions" / "ch02_layers" / "minisgl" / "notodo.py", "def f():\n    # >>> solution\n    return 1\n    # <<< solution\n")
    with pytest.raises(DirectiveError, match="TODO"):
        hook.render_code("solutions/ch02_layers/minisgl/notodo.py", "f")


def test_folded_reference_keeps_the_directive_indentation(repo):
    out = hook.expand_markdown("=== \"tab\"\n\n    ::code solutions/ch01_core/minisgl/core.py helper\n", "docs/x.md")
    assert '\n    ??? warning course-solution "Reference solution: helper' in out, out
    assert '\n        ```python title="minisgl/core.py"\n        def helper(x):\n' in out, out


# ------------------------------------------------------------------------------------- ::tree


def test_tree_counts_and_marks(repo):
    paths, new, modified = hook.tree_status(2)
    assert paths == [
        "minisgl/__init__.py",
        "minisgl/bad.py",
        "minisgl/core.py",
        "minisgl/layers/__init__.py",
        "minisgl/layers/norm.py",
        "minisgl/leaky.py",
    ]  # chapter 0's standalone file belongs to its own tree only
    assert new == {"minisgl/bad.py", "minisgl/leaky.py", "minisgl/layers/__init__.py", "minisgl/layers/norm.py"}
    assert modified == {"minisgl/core.py"}

    block = hook.render_tree(2)
    assert block == textwrap.dedent(
        """\
        ```text title="the package at the end of chapter 2"
        .
        └── minisgl/
            ├── layers/
            │   ├── __init__.py  (new)
            │   └── norm.py  (new)
            ├── __init__.py
            ├── bad.py  (new)
            ├── core.py  (modified)
            └── leaky.py  (new)
        ```

        **6** files in total · **4** new in chapter 2 · **1** modified in chapter 2
        { .course-tree-counts }
        """
    )


def test_tree_of_first_chapters(repo):
    paths, new, modified = hook.tree_status(0)
    assert paths == ["tiny_engine.py"] and new == {"tiny_engine.py"} and modified == set()
    assert "**1** file in total · **1** new in chapter 0 · **0** modified in chapter 0" in hook.render_tree(0)
    paths, new, modified = hook.tree_status(1)
    assert len(paths) == 2 and new == {"minisgl/__init__.py", "minisgl/core.py"} and modified == set()


def test_tree_of_missing_chapter_raises(repo):
    with pytest.raises(DirectiveError, match="chapter 5 has no folder"):
        hook.tree_status(5)


# ----------------------------------------------------------------------------------- ::output


def test_output_included_and_ansi_stripped(repo):
    _write(repo / "docs" / "outputs" / "ch01_core.txt", "\x1b[32mok\x1b[0m line\n\n")
    block = '```text title="output of ch01_core/main.py"\nok line\n```\n'
    assert hook.render_output("ch01_core") == f'<div class="course-output" markdown>\n\n{block}\n</div>\n'
    assert 'title="ch01_core/main.py 的输出"' in hook.render_output("ch01_core", "zh"), "a Chinese page's label"


def test_missing_output_raises_and_says_make_outputs(repo):
    with pytest.raises(DirectiveError, match="make outputs"):
        hook.render_output("ch01_core")


# ------------------------------------------------------------------------------ page expansion


def test_expand_page(repo):
    _write(repo / "docs" / "outputs" / "ch01_core.txt", "hello\n")
    page = textwrap.dedent(
        """\
        # Title

        ::code solutions/ch01_core/minisgl/core.py PAGE_SIZE

        ```text
        ::code solutions/ch01_core/minisgl/core.py not_expanded_inside_a_fence
        ```

        ??? example "folded"
            ::output ch01_core

        end
        """
    )
    out = hook.expand_markdown(page, "docs/x.md")
    assert '```python title="minisgl/core.py"\nPAGE_SIZE = 16\n```\n' in out
    assert "::code solutions/ch01_core/minisgl/core.py not_expanded_inside_a_fence" in out
    assert '    ```text title="output of ch01_core/main.py"\n    hello\n    ```\n' in out
    assert out.startswith("# Title\n\n") and out.endswith("\nend\n")


def test_expand_page_errors_name_page_and_line(repo):
    with pytest.raises(PluginError, match=r"docs/x.md:3: ::code .*nope"):
        hook.expand_markdown("a\n\n::code solutions/ch01_core/minisgl/core.py nope\n", "docs/x.md")


@pytest.mark.parametrize(
    "line, message",
    [("::diff 3", "unknown directive ::diff"), ("::tree x", "usage: ::tree"), ("::code", "usage: ::code"), ("::output a b", "usage")],
)
def test_bad_directives_raise(repo, line, message):
    with pytest.raises(PluginError, match=message):
        hook.expand_markdown(line + "\n", "docs/x.md")


def test_text_that_only_looks_like_a_directive_is_left_alone(repo):
    text = "a ::code b\n:: not a directive\n~~~\n::tree 9\n~~~\n"
    assert hook.expand_markdown(text, "docs/x.md") == text


def test_on_page_markdown_event(repo):
    page = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/ch01_core.md"))
    out = hook.on_page_markdown("::tree 1\n", page=page, config={}, files=None)
    assert "**2** files in total" in out
    with pytest.raises(PluginError, match="docs/chapters/ch01_core.md:1"):
        hook.on_page_markdown("::tree 7\n", page=page, config={}, files=None)


def test_chinese_line_breaks_are_joined_but_code_and_blocks_are_kept():
    page = "第一行的结尾\n接着第二行。\nEnglish words\n中文开头\n\n```text\n代码一\n代码二\n```\n- 列表\n- 第二项\n"
    out = hook.join_cjk_lines(page)
    assert "第一行的结尾接着第二行。" in out, out
    assert "English words\n中文开头" in out, "a break next to Latin text stays (it is a space there)"
    assert "代码一\n代码二" in out, "code blocks are left alone"
    assert "- 列表\n- 第二项" in out, "a list item starts with a marker, so it is never joined"


def test_a_chinese_page_gets_chinese_labels_and_the_same_code(repo):
    en, zh = hook.render_code(CORE, "helper"), hook.render_code(CORE, "helper", lang="zh")
    open_part, header, folded = _split_folded(zh)
    assert open_part.startswith('```python title="minisgl/core.py（你的起点）"\n'), open_part
    assert header == '??? warning course-solution "参考实现：helper（先自己动手写）"', header
    assert "make check CH=1" in folded and "chapters/ch01_core/minisgl/core.py" in folded, folded
    assert re.findall(r"```python.*?```", en, re.S)[0].split("\n", 1)[1] == \
        re.findall(r"```python.*?```", zh, re.S)[0].split("\n", 1)[1], "the code itself is the same in both languages"


GLOSSARY = """\
- id: memory
  en: Memory
  zh: 显存
  terms:
    - en: KV cache
      zh: KV cache
      avoid: [KV 缓存]
      others: [KV 缓存, 键值缓存]
      en_note: the keys and values of computed tokens
      zh_note: 已算过的 token 的 key 和 value
    - en: page table
      zh: 页表
      en_note: per request row, the slot of each position
      zh_note: 每个请求一行，记着每个位置的槽位
- id: speculative
  en: Speculative decoding
  zh: 投机解码
  terms:
    - en: speculative decoding
      zh: 投机解码
      avoid: [推测解码]
      others: [推测解码]
      en_note: a cheap guess the model checks in one pass
      zh_note: 先便宜地猜，再让模型一次验证
"""


def test_the_glossary_is_grouped_by_topic_with_other_renderings(tmp_path, monkeypatch):
    from tools import i18n

    path = tmp_path / "glossary.yml"
    path.write_text(GLOSSARY, encoding="utf-8")
    monkeypatch.setattr(i18n, "GLOSSARY", path)
    monkeypatch.setattr(i18n.glossary_topics, "__defaults__", (path,))
    en, zh = hook.render_glossary("en"), hook.render_glossary("zh")
    for page, titles in ((en, ("Memory", "Speculative decoding")), (zh, ("显存", "投机解码"))):
        headings = re.findall(r"^## (.+?) \{ #([a-z-]+) \}$", page, re.M)
        assert headings == [(titles[0], "memory"), (titles[1], "speculative")], f"topic headings: {headings}"
        rows = [line for line in page.splitlines() if line.startswith("|") and "---" not in line]
        assert all(line.count(" | ") == 3 for line in rows), f"a row without four columns: {rows}"
    assert "| KV cache | KV cache | KV 缓存、键值缓存 | the keys and values of computed tokens |" in en, en
    assert "| 投机解码 | speculative decoding | 推测解码 | 先便宜地猜，再让模型一次验证 |" in zh, zh
    assert "| 页表 | page table | — |" in zh, "a term without other renderings shows a dash"
