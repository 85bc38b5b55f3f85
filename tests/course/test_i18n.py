"""The book in two languages stays in step (tools/i18n.py; CONTRIBUTING.md says how to change a page).

Every English page (the book's pages, each practice problem's problem.md, README.md, CONTRIBUTING.md) has a
Chinese twin that records the English version it translates; the pair shares its code, directives, math,
links, inline code, numbers, table numbers, headings and admonitions (a shell block's comments, a `text` diagram's
words and math's \\text{...} labels are prose, translated); the Chinese pages follow the glossary.
The last tests check the checker itself on small pages, so each rule is known to be able to fail.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tools import i18n

ROOT = i18n.ROOT
PAGES = i18n.english_pages()


def _stale_note(pages: list[Path]) -> str:
    return "\n".join(f"  {p}: see what changed with `python -m tools.i18n diff {p}`, translate it, "
                     f"then `python -m tools.i18n stamp {p}`" for p in pages)


def test_every_english_page_has_a_chinese_twin():
    states = [i18n.pair_state(p) for p in PAGES]
    missing = [s for s in states if s.state in ("missing", "unstamped", "wrong source")]
    assert not missing, f"{len(missing)} of {len(PAGES)} English pages lack a stamped Chinese twin:\n" + "\n".join(
        f"  {s.english} -> {s.chinese}: {s.state}" + (f" ({s.detail})" if s.detail else "") for s in missing)
    assert not i18n.orphans(), f"Chinese pages without an English page: {i18n.orphans()}"
    for page, reason in i18n.ENGLISH_ONLY.items():
        assert reason.strip(), f"{page} is listed as English only without a reason"


def test_every_chinese_twin_has_one_stamp_line():
    """A second stamp-like line (an old or hand-made one) stays in the page, before its title, where the hook
    strips only the first."""
    extra = []
    for page in PAGES:
        chinese = ROOT / i18n.twin(page)
        if chinese.is_file():
            lines = [n for n, line in i18n.prose_lines(chinese.read_text(encoding="utf-8"))
                     if line.startswith("<!-- translation of ")]
            if len(lines) > 1:
                extra.append(f"{i18n.twin(page)}: stamp lines at {lines}")
    assert not extra, "Chinese pages with more than one stamp line:\n" + "\n".join(extra)


def test_every_chinese_twin_translates_the_current_english_page():
    stale = [s.english for s in map(i18n.pair_state, PAGES) if s.state == "stale"]
    assert not stale, (f"{len(stale)} Chinese pages translate an older version of their English page:\n"
                       + _stale_note(stale))


@pytest.mark.parametrize("page", PAGES, ids=[p.as_posix() for p in PAGES])
def test_twins_share_code_numbers_and_structure(page):
    chinese = ROOT / i18n.twin(page)
    if not chinese.is_file():
        pytest.skip(f"{i18n.twin(page)} does not exist (test_every_english_page_has_a_chinese_twin fails on it)")
    problems = i18n.compare((ROOT / page).read_text(encoding="utf-8"), chinese.read_text(encoding="utf-8"), page)
    assert not problems, f"{i18n.twin(page)} is out of step with {page}:\n  - " + "\n  - ".join(problems)


def test_chinese_pages_follow_the_glossary():
    entries = i18n.glossary()
    found = []
    for page in PAGES:
        chinese = ROOT / i18n.twin(page)
        if not chinese.is_file() or page.as_posix() == "docs/glossary.md":
            continue
        for n, line in i18n.prose_lines(chinese.read_text(encoding="utf-8")):
            for e in entries:
                found += [f"{i18n.twin(page)}:{n}: {word!r} (the glossary writes {e['en']!r} as {e['zh']!r})"
                          for word in e["avoid"] if word in line]
    assert not found, "renderings the glossary rules out:\n" + "\n".join(found)


def test_the_glossary_check_reads_prose_not_code():
    page = "用 `KV 缓存` 的名字\n```python\nx = 1  # KV 缓存\n```\n```bash\nmake run  # KV 缓存\n```\nKV 缓存\n"
    lines = [n for n, line in i18n.prose_lines(page) if "KV 缓存" in line]
    assert lines == [6, 8], f"lines the glossary check reads: expected the shell comment and the prose (6, 8), got {lines}"


def test_glossary_is_well_formed():
    topics = i18n.glossary_topics()
    for topic in topics:
        for key in ("id", "en", "zh"):
            assert str(topic.get(key, "")).strip(), f"glossary topic {topic.get('id')!r} has no {key}"
        assert re.fullmatch(r"[a-z][a-z-]*", topic["id"]), f"topic id {topic['id']!r} is not a heading id"
        assert topic["terms"], f"glossary topic {topic['id']!r} has no terms"
    ids = [t["id"] for t in topics]
    assert len(ids) == len(set(ids)), f"glossary topic ids listed twice: {ids}"
    entries = i18n.glossary()
    assert len(entries) >= 50, f"only {len(entries)} glossary entries"
    for e in entries:
        for key in ("en", "zh", "en_note", "zh_note"):
            assert str(e.get(key, "")).strip(), f"glossary entry {e.get('en')!r} has no {key}"
        assert not any(word in str(e["zh"]) for word in e["avoid"]), f"{e['en']!r}: its own rendering is avoided"
        assert isinstance(e["others"], list) and str(e["zh"]) not in map(str, e["others"]), \
            f"{e['en']!r}: `others` must list renderings other than its own ({e['zh']!r}), got {e['others']!r}"
    for key in ("en", "zh"):
        seen = [str(e[key]) for e in entries]
        assert len(seen) == len(set(seen)), f"glossary terms listed twice ({key}): " \
            f"{sorted({t for t in seen if seen.count(t) > 1})}"


def test_readmes_link_each_other_and_share_the_set_up_commands():
    en = (ROOT / "README.md").read_text(encoding="utf-8")
    zh = (ROOT / "README.zh.md").read_text(encoding="utf-8") if (ROOT / "README.zh.md").is_file() else ""
    assert "[中文](README.zh.md)" in en.splitlines()[0], "README.md's first line must link the Chinese README"
    assert "[English](README.md)" in "\n".join(zh.splitlines()[:3]), "README.zh.md must link back to README.md at its top"
    for command in ("make run", "make test"):
        assert command in zh, f"README.zh.md lacks `{command}`"


def test_site_workflow_builds_both_languages_with_the_make_target():
    workflows = list((ROOT / ".github" / "workflows").glob("*.yml"))
    pages = [w for w in workflows if "pages" in w.read_text(encoding="utf-8").lower()]
    assert pages, "no GitHub Pages workflow under .github/workflows/"
    text = pages[0].read_text(encoding="utf-8")
    assert re.search(r"^\s*(-\s*)?run:.*\bmake docs-build\b", text, re.M), \
        f"{pages[0].relative_to(ROOT)} must build the site with `make docs-build` (what make test checks)"
    assert "site" in text, f"{pages[0].relative_to(ROOT)} must publish the built site/ folder"


# ------------------------------------------------------------------------------ the checker itself

ENGLISH = """# Chapter 9: Radix prefix cache

A prompt of 1,024 tokens shares 512 with `req_a`; see [run it](#run-it) and [chapter 8](ch08_cache.md#summary).

??? question "1. Why?"
    Because \\(n - 1\\) tokens are matched.

```python
x = 1  # the answer
```

```mermaid
flowchart LR
  A["prompt"] --> B["match"]
```

::code solutions/ch09_radix_cache/minisgl/kvcache/radix_cache.py RadixCache.match

| case | tokens |
|---|---|
| hit | 512 |

## Run it
"""

CHINESE = """# 第 9 章：基数树前缀缓存

一个 1,024 token 的 prompt 和 `req_a` 共享 512 个；见[运行](#run-it)和[第 8 章](ch08_cache.md#summary)。

??? question "1. 为什么？"
    因为匹配了 \\(n - 1\\) 个 token。

```python
x = 1  # the answer
```

```mermaid
flowchart LR
  A["prompt"] --> B["匹配"]
```

::code solutions/ch09_radix_cache/minisgl/kvcache/radix_cache.py RadixCache.match

| 情况 | token 数 |
|---|---|
| 命中 | 512 |

## 运行
"""

MUTATIONS = {
    "a changed code block": ("x = 1  # the answer", "x = 2  # the answer", "code block 1"),
    "a changed directive": ("RadixCache.match", "RadixCache.insert", "directives"),
    "changed math": ("\\(n - 1\\)", "\\(n\\)", "math"),
    "a dropped number": ("1,024 token", "一千 token", "numbers"),
    "a changed link target": ("(ch08_cache.md#summary)", "(ch08_cache.md)", "links"),
    "dropped inline code": ("和 `req_a` 共享", "和它共享", "inline code"),
    "a missing heading": ("## 运行\n", "运行\n", "headings"),
    "another admonition kind": ('??? question "1. 为什么？"', '??? note "1. 为什么？"', "admonitions"),
    "a changed table number": ("| 命中 | 512 |", "| 命中 | 256 |", "table 1"),
    "a mermaid arrow dropped": ('A["prompt"] --> B["匹配"]', 'A["prompt"]', "mermaid"),
}


def test_checker_accepts_a_faithful_translation():
    assert i18n.compare(ENGLISH, CHINESE) == []


@pytest.mark.parametrize("name", MUTATIONS)
def test_checker_names_what_differs(name):
    old, new, expected = MUTATIONS[name]
    assert old in CHINESE, old
    problems = i18n.compare(ENGLISH, CHINESE.replace(old, new))
    assert any(p.startswith(expected) for p in problems), f"{name}: expected a problem about {expected!r}, got {problems}"


# Shell comments, a diagram's words and math labels are prose: translated. The rest of them is not.
ENGLISH_PROSE_IN_CODE = """Run it:

```bash
make run CH=10   # run chapter 10's example
# then the chapter's tests
make check CH=10 SOL=1
echo "tag #1"
```

```text
step      1        2
A         d        d     one decode token each
D      [0:16]   [16:32]+tok1
tokens    19       4
```

```output
served 3 requests, finish length
```

$$
\\text{bytes per token} = 2 \\cdot \\text{cached\\_len}
$$
"""

CHINESE_PROSE_IN_CODE = """运行：

```bash
make run CH=10   # 运行第 10 章的示例
# 然后跑本章的测试，
# 用参考实现
make check CH=10 SOL=1
echo "tag #1"
```

```text
步        1        2
A         d        d     每个请求各一个 decode token
D      [0:16]   [16:32]+tok1
token 数  19       4
```

```output
served 3 requests, finish length
```

$$
\\text{每个 token 的字节数} = 2 \\cdot \\text{cached\\_len}
$$
"""

PROSE_IN_CODE_MUTATIONS = {
    "a changed command beside a translated comment": ("make run CH=10   #", "make run CH=11   #", "code block 1"),
    "a changed command option": ("make check CH=10 SOL=1", "make check CH=10", "code block 1"),
    "a changed quoted #, which is no comment": ('echo "tag #1"', 'echo "tag #2"', "code block 1"),
    "a dropped command": ("make check CH=10 SOL=1\n", "", "code block 1"),
    "a changed number in a diagram": ("token 数  19", "token 数  18", "code block 2"),
    "a changed name in a diagram": ("A         d        d", "B         d        d", "code block 2"),
    "a changed identifier in a diagram": ("+tok1", "+tok2", "code block 2"),
    "a translated program output": ("served 3 requests, finish length", "处理了 3 个请求，finish length", "code block 3"),
    "a changed identifier in a math label": ("\\text{cached\\_len}", "\\text{device\\_len}", "math"),
    "changed math beside a translated label": ("= 2 \\cdot", "= 4 \\cdot", "math"),
}


def test_checker_accepts_translated_comments_diagrams_and_labels():
    assert i18n.compare(ENGLISH_PROSE_IN_CODE, CHINESE_PROSE_IN_CODE) == []


@pytest.mark.parametrize("name", PROSE_IN_CODE_MUTATIONS)
def test_checker_still_compares_commands_diagram_numbers_and_label_names(name):
    old, new, expected = PROSE_IN_CODE_MUTATIONS[name]
    assert old in CHINESE_PROSE_IN_CODE, old
    problems = i18n.compare(ENGLISH_PROSE_IN_CODE, CHINESE_PROSE_IN_CODE.replace(old, new, 1))
    assert any(p.startswith(expected) for p in problems), f"{name}: expected a problem about {expected!r}, got {problems}"


def test_a_changed_command_on_any_page_is_caught():
    """On every real pair: change the first command of the Chinese page's first shell block (one that has a
    command), and the check names that block."""
    tried = []
    for page in PAGES:
        chinese = ROOT / i18n.twin(page)
        if not chinese.is_file():
            continue
        text = chinese.read_text(encoding="utf-8")
        lines = text.splitlines()
        for n, line in enumerate(lines):
            fence = i18n.FENCE.match(line)
            if not fence or fence.group("info").strip().split()[:1] not in ([lang] for lang in i18n.SHELL):
                continue
            body = next((k for k in range(n + 1, len(lines)) if lines[k].strip().startswith(fence.group("fence"))), n)
            command = next((k for k in range(n + 1, body) if i18n.strip_shell_comments(lines[k]).strip()), None)
            if command is None:
                continue
            raw = lines[command]
            lead = len(raw) - len(raw.lstrip())
            edited = raw[:lead] + (raw[lead:].replace(" ", " --changed ", 1) if " " in raw[lead:] else raw[lead:] + "x")
            changed = lines[:command] + [edited] + lines[command + 1:]
            problems = i18n.compare((ROOT / page).read_text(encoding="utf-8"), "\n".join(changed), page)
            assert any(p.startswith("code block") for p in problems), \
                f"{i18n.twin(page)}:{command + 1}: a changed command went unnoticed: {problems}"
            tried.append(page)
            break
    assert len(tried) >= 20, f"only {len(tried)} pages have a shell block with a command: {tried}"


def test_chinese_headings_get_their_english_ids():
    ids = i18n.heading_ids(ENGLISH)
    assert ids == ["chapter-9-radix-prefix-cache", "run-it"], ids
    out = i18n.with_english_ids(CHINESE, ENGLISH)
    assert "# 第 9 章：基数树前缀缓存 { #chapter-9-radix-prefix-cache }" in out and "## 运行 { #run-it }" in out, out
    assert "x = 1  # the answer" in out, "a comment inside a code block is not a heading"


def test_stamp_records_the_english_version_and_goes_stale_on_an_edit(tmp_path):
    (tmp_path / "docs").mkdir()
    english, chinese = Path("docs/page.md"), Path("docs/page.zh.md")
    (tmp_path / english).write_text(ENGLISH, encoding="utf-8")
    (tmp_path / chinese).write_text(CHINESE, encoding="utf-8")
    assert i18n.pair_state(english, tmp_path).state == "unstamped"
    (tmp_path / chinese).write_text(i18n.with_stamp(CHINESE, i18n.stamp_line(english, tmp_path)), encoding="utf-8")
    assert i18n.pair_state(english, tmp_path).state == "current"
    stamped = (tmp_path / chinese).read_text(encoding="utf-8")
    assert stamped.splitlines()[0].startswith("<!-- translation of docs/page.md @ ")
    assert i18n.compare(ENGLISH, stamped) == [], "the stamp line is not part of the page's content"
    (tmp_path / english).write_text(ENGLISH + "\nOne more line.\n", encoding="utf-8")
    state = i18n.pair_state(english, tmp_path)
    assert state.state == "stale" and "translates" in state.detail, state


def test_a_problems_stamp_goes_after_its_front_matter():
    text = "---\ntitle: 题目\n---\n\n正文\n"
    stamped = i18n.with_stamp(text, "<!-- translation of practice/problems/x/problem.md @ 0123456789ab -->")
    assert stamped.startswith("---\ntitle: 题目\n---\n<!-- translation of "), stamped
    assert i18n.read_stamp(stamped) == ("practice/problems/x/problem.md", "0123456789ab")


def test_blob_id_is_gits():
    data = (ROOT / "README.md").read_bytes()
    try:
        git = subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True,
                             cwd=ROOT).stdout.decode().strip()
    except (FileNotFoundError, subprocess.CalledProcessError):
        pytest.skip("git is not available")
    assert i18n.blob_id(data) == git
