"""The book in two languages: which pages pair up, which English version each Chinese page translates,
and what must stay identical between the two.

Every English page has a Chinese twin beside it: `docs/x.md` -> `docs/x.zh.md`, a practice problem's
`problem.md` -> `problem.zh.md`, `README.md` -> `README.zh.md`. The twin records the English version it
translates in one comment line (a problem's twin: right after its front matter; every other twin: its
first line), the English file's git blob id:

    <!-- translation of docs/chapters/ch10_chunked_prefill.md @ 1a2b3c4d5e6f -->

An edit to the English page changes its blob id, so the twin is stale until someone translates the
change and stamps it again:

    python -m tools.i18n status                 # every pair: current, stale or missing
    python -m tools.i18n diff PAGE              # the English changes since the twin's stamp (what to translate)
    python -m tools.i18n stamp PAGE [PAGE ...]  # after translating: record the English version translated

PAGE may name either page of a pair. `structure()` and `compare()` say what the pair must share (code
blocks, directives, math, links, headings, admonitions, table numbers, inline code, numbers); the
course's tests (tests/course/test_i18n.py) and the book's hook (heading ids) use them.

Three things inside code and math are prose and get translated: the `#` comments of shell blocks
(bash, sh, shell, console), the words of a `text` block (a diagram; program output and data go in
`output` blocks, compared byte for byte) and the `\text{...}` labels of math. What stays compared there
is everything else: the commands, and in a diagram or a label its numbers, identifiers (`cached_len`,
`UserMsg`), one-letter names and drawing symbols, in order.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "docs" / "glossary.yml"
ZH = "zh"

# Pages that stay English only for now, each with its reason (the pairing tests accept nothing else).
ENGLISH_ONLY: dict[str, str] = {}

STAMP = re.compile(r"^<!-- translation of (?P<source>\S+) @ (?P<blob>[0-9a-f]{12,40}) -->[ \t]*$", re.M)
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
HEADING = re.compile(r"^(?P<hashes>#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
EXPLICIT_ID = re.compile(r"\{[^}]*#(?P<id>[\w-]+)[^}]*\}\s*$")
DIRECTIVE = re.compile(r"^[ \t]*::[a-z][a-z_]*(?:[ \t].*)?$")
ADMONITION = re.compile(r"^(?P<indent>[ \t]*)(?P<marker>!!!|\?\?\?\+?)[ \t]+(?P<kind>[\w-]+(?:[ \t]+[\w-]+)*)")
# A code span may run over one line break (Markdown joins it with a space), never over a blank line.
INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)(?P<code>(?:[^\n]|\n(?![ \t]*\n))+?)(?<!`)\1(?!`)")
MATH_BLOCK = re.compile(r"\$\$.*?\$\$", re.S)
MATH_INLINE = re.compile(r"\\\(.*?\\\)", re.S)
LINK = re.compile(r"\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
NUMBER = re.compile(r"(?<![\d.,])\d+(?:[.,]\d+)*")
TITLE_ATTR = re.compile(r'\s*title="[^"]*"')
HTML_TAG = re.compile(r"</?[A-Za-z!][^<>\n]*>")  # a tag on one line (not "a <= b ... c -> d")


# ------------------------------------------------------------------------------------------ pairs


def english_pages() -> list[Path]:
    """Every English page of the course (paths relative to the repository root), sorted."""
    pages = [p for p in (ROOT / "docs").rglob("*.md")
             if not p.name.endswith(f".{ZH}.md") and not {"hooks", "outputs", "vendor"} & set(p.parts)]
    pages += (ROOT / "practice" / "problems").glob("*/problem.md")
    pages += [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    return sorted(p.relative_to(ROOT) for p in pages if p.is_file())


def twin(page: Path) -> Path:
    """docs/x.md -> docs/x.zh.md (and back)."""
    page = Path(page)
    if page.name.endswith(f".{ZH}.md"):
        return page.with_name(page.name[: -len(f".{ZH}.md")] + ".md")
    return page.with_name(page.stem + f".{ZH}.md")


def english_of(page: Path) -> Path:
    page = Path(page)
    return twin(page) if page.name.endswith(f".{ZH}.md") else page


def blob_id(data: bytes) -> str:
    """git's blob id of a file's bytes (`git hash-object`), without needing git."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def read_stamp(text: str) -> tuple[str, str] | None:
    """(English source path, blob id) recorded in a Chinese page, None if it has no stamp."""
    m = STAMP.search(text)
    return (m.group("source"), m.group("blob")) if m else None


def stamp_line(english: Path, root: Path = ROOT) -> str:
    blob = blob_id((root / english).read_bytes())[:12]
    return f"<!-- translation of {Path(english).as_posix()} @ {blob} -->"


def with_stamp(text: str, line: str) -> str:
    """The page's text with its stamp replaced by `line` (or added: after front matter, else first)."""
    if STAMP.search(text):
        return STAMP.sub(line, text, count=1)
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end >= 0:
            cut = end + len("\n---\n")
            return text[:cut] + line + "\n" + text[cut:]
    return line + "\n" + text


@dataclass
class PairState:
    english: Path
    chinese: Path
    state: str  # "current", "stale", "missing", "unstamped", "wrong source", "english only"
    detail: str = ""


def pair_state(english: Path, root: Path = ROOT) -> PairState:
    chinese = twin(english)
    rel = Path(english).as_posix()
    if rel in ENGLISH_ONLY:
        return PairState(english, chinese, "english only", ENGLISH_ONLY[rel])
    if not (root / chinese).is_file():
        return PairState(english, chinese, "missing")
    stamp = read_stamp((root / chinese).read_text(encoding="utf-8"))
    if stamp is None:
        return PairState(english, chinese, "unstamped", f"no '<!-- translation of {rel} @ ... -->' line")
    source, blob = stamp
    if source != rel:
        return PairState(english, chinese, "wrong source", f"the stamp names {source}, not {rel}")
    now = blob_id((root / english).read_bytes())
    if not now.startswith(blob):
        return PairState(english, chinese, "stale", f"translates {blob}, the English page is now {now[:12]}")
    return PairState(english, chinese, "current")


def orphans(root: Path = ROOT) -> list[Path]:
    """Chinese pages whose English page does not exist."""
    found = [p for p in (root / "docs").rglob(f"*.{ZH}.md") if "vendor" not in p.parts]
    found += (root / "practice" / "problems").glob(f"*/problem.{ZH}.md")
    found += [p for p in (root / f"README.{ZH}.md", root / f"CONTRIBUTING.{ZH}.md") if p.is_file()]
    return sorted(p.relative_to(root) for p in found if not (root / twin(p.relative_to(root))).is_file())


# ------------------------------------------------------------------------------------------ structure


@dataclass
class Structure:
    """What a page and its translation must share."""

    code: list[tuple[str, str]] = field(default_factory=list)  # (info string without title, text)
    mermaid: list[tuple[str, int]] = field(default_factory=list)  # (first line, number of arrows)
    directives: list[str] = field(default_factory=list)
    math: list[str] = field(default_factory=list)
    headings: list[int] = field(default_factory=list)  # levels, in order
    admonitions: list[tuple[int, str, str]] = field(default_factory=list)  # (indent, marker, kind)
    tables: list[list[list[str]]] = field(default_factory=list)  # numeric cells ('' for text cells)
    links: list[str] = field(default_factory=list)  # sorted link and image targets
    inline_code: set[str] = field(default_factory=set)
    numbers: dict[str, int] = field(default_factory=dict)  # number in prose -> count


SHELL = {"bash", "sh", "shell", "console", "zsh"}
DIAGRAM = "text"
CJK_RUN = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]+")
# A diagram's or a label's tokens: numbers, names (words, identifiers), or one symbol.
TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[A-Za-z_](?:\w|\.(?=\w))*(?:['\u2019-][A-Za-z]+)*|\S", re.A)
PUNCTUATION = set(",.;:!?()'\"`\u2018\u2019\u201c\u201d")  # prose punctuation, which a translation makes full-width
TEXT_LABEL = re.compile(r"\\text(?:rm|bf|it|sf)?\{(?P<label>(?:[^{}]|\{[^{}]*\})*)\}")


def _is_word(token: str) -> bool:
    """A prose word (translated), as opposed to a name that stays: an identifier (`cached_len`, `tok1`,
    `UserMsg`, `KiB`) or a one-letter name (`A`, `j`, `P`)."""
    if len(token) < 2 or not token[0].isalpha() or re.search(r"[\d_]|\.\w", token):
        return False
    letters = token.replace("'", "").replace("\u2019", "").replace("-", "")
    return not (any(c.isupper() for c in letters[1:]) and any(c.islower() for c in letters))


def fixed_tokens(text: str) -> list[str]:
    """What a diagram or a math label must keep in every language: its tokens in order, less its prose
    words, its Chinese text and its prose punctuation (half- or full-width)."""
    text = CJK_RUN.sub(" ", text.replace("\\_", "_"))
    return [t for t in TOKEN.findall(text) if t not in PUNCTUATION and not _is_word(t)]


def strip_shell_comments(script: str) -> str:
    """A shell script without its `#` comments (a `#` that starts a word outside quotes); a line that was
    only a comment goes, so a comment may take more or fewer lines in a translation."""
    out = []
    for line in script.splitlines():
        quote, cut = "", None
        for i, c in enumerate(line):
            if quote:
                if c == quote and (quote == "'" or line[i - 1] != "\\"):
                    quote = ""
            elif c in "'\"" and (i == 0 or line[i - 1] != "\\"):
                quote = c
            elif c == "#" and (i == 0 or line[i - 1] in " \t"):
                cut = i
                break
        if cut is None:
            out.append(line)
        elif line[:cut].strip():
            out.append(line[:cut].rstrip())
    return "\n".join(out)


def _compared_code(lang: str, body: str) -> str:
    """The part of a code block that the translation keeps as it is."""
    if lang in SHELL:
        return strip_shell_comments(body)
    if lang == DIAGRAM:
        return "\n".join(fixed_tokens(body))
    return body


def _compared_math(math: str) -> str:
    """Math with each \\text{...} label reduced to what it must keep (its numbers and names)."""
    return TEXT_LABEL.sub(lambda m: "\\text{" + " ".join(fixed_tokens(m.group("label"))) + "}", math)


ARROW = re.compile(r"-->|==>|-\.->|---|-\.-|~~~|->>|-->>|-\)|--x|--o|<-->")


def _fenced(text: str):
    """Yield each line outside code fences as a str, and each fenced block as (opening match, its lines
    from the opening fence to the closing one, both included)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            yield lines[i]
            i += 1
            continue
        fence, start = m.group("fence"), i
        i += 1
        while i < len(lines):
            s = lines[i].strip()
            if s.startswith(fence[0]) and set(s) == {fence[0]} and len(s) >= len(fence):
                break
            i += 1
        i += 1
        yield m, lines[start:i]


def _split_blocks(text: str):
    """Yield ("code", info, body, indent) for fenced blocks and ("text", line) for other lines."""
    for block in _fenced(text):
        if isinstance(block, str):
            yield ("text", block)
            continue
        m, lines = block
        indent = m.group("indent")
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[1:]]
        closed = len(lines) > 1 and set(lines[-1].strip()) == {m.group("fence")[0]}
        yield ("code", m.group("info").strip(), "\n".join(body[:-1] if closed else body), indent)


def _table_cells(row: str) -> list[str]:
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|"):
        row = row[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)]


NUMERIC_CELL = re.compile(r"^[~≈<>≤≥+\-−]?\s*\*{0,2}[\d.,]+\*{0,2}\s*(x|%|ms|s|us|µs|GB|MB|GiB|MiB|tok/s)?\s*$")


def _prose_without_code(line: str) -> str:
    line = INLINE_CODE.sub(" ", line)
    line = LINK.sub("]( )", line)
    line = HTML_TAG.sub(" ", line)
    return line


def structure(text: str) -> Structure:
    s = Structure()
    if text.startswith("---\n"):  # front matter (a problem's): not part of the page's body
        end = text.find("\n---\n", 4)
        if end >= 0:
            text = text[end + len("\n---\n"):]
    text = STAMP.sub("", text)
    prose: list[str] = []
    table: list[list[str]] | None = None
    for block in _split_blocks(text):
        if block[0] == "code":
            _, info, body, _ = block
            table = None
            lang = info.split()[0] if info else ""
            if lang == "mermaid":
                first = next((ln.strip() for ln in body.splitlines() if ln.strip()), "")
                s.mermaid.append((first, len(ARROW.findall(body))))
            else:
                s.code.append((TITLE_ATTR.sub("", info), _compared_code(lang, body)))
            continue
        line = block[1]
        if DIRECTIVE.match(line):
            s.directives.append(line.strip())
            continue
        h = HEADING.match(line)
        if h:
            s.headings.append(len(h.group("hashes")))
        a = ADMONITION.match(line)
        if a:
            s.admonitions.append((len(a.group("indent").expandtabs(4)), a.group("marker"), a.group("kind")))
        if line.lstrip().startswith("|"):
            cells = _table_cells(line)
            if table is None:
                table = []
                s.tables.append(table)
            if not all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
                table.append([c if NUMERIC_CELL.match(c) else "" for c in cells])
        else:
            table = None
        prose.append(line)
    body = "\n".join(prose)
    s.math = [_compared_math(m.strip()) for m in MATH_BLOCK.findall(body)]
    body = MATH_BLOCK.sub(" ", body)
    s.math += [_compared_math(m.strip()) for m in MATH_INLINE.findall(body)]
    body = MATH_INLINE.sub(" ", body)
    s.links = sorted(m.group("target") for m in LINK.finditer(body))
    s.inline_code = {" ".join(m.group("code").split()) for m in INLINE_CODE.finditer(body)}
    for n in NUMBER.findall(_prose_without_code(body)):
        s.numbers[n] = s.numbers.get(n, 0) + 1
    return s


def _first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"item {i + 1}: English {x!r}, Chinese {y!r}"
    return f"English has {len(a)}, Chinese {len(b)}"


def compare(english: str, chinese: str, page: Path | None = None) -> list[str]:
    """What differs between a page and its translation where they must agree (empty: nothing).
    With `page` (the English page's path), a link from either page to the other (a README's language
    switch) counts as the same link."""
    en, zh = structure(english), structure(chinese)
    if page is not None:
        en_name, zh_name = Path(page).name, twin(Path(page)).name
        en.links = sorted("<twin>" if x == zh_name else x for x in en.links)
        zh.links = sorted("<twin>" if x == en_name else x for x in zh.links)
    out = []
    if en.code != zh.code:
        if len(en.code) != len(zh.code):
            out.append(f"code blocks: English has {len(en.code)}, Chinese {len(zh.code)}")
        else:
            i = next(i for i, (x, y) in enumerate(zip(en.code, zh.code)) if x != y)
            diff = "\n".join(difflib.unified_diff(en.code[i][1].splitlines(), zh.code[i][1].splitlines(),
                                                  "English", "Chinese", lineterm="", n=1))
            out.append(f"code block {i + 1} ({en.code[i][0] or 'no language'}) differs:\n{diff or en.code[i][0]}")
    if en.mermaid != zh.mermaid:
        out.append(f"mermaid diagrams (first line, arrows): {_first_difference(en.mermaid, zh.mermaid)}")
    for name in ("directives", "math", "headings", "admonitions"):
        a, b = getattr(en, name), getattr(zh, name)
        if a != b:
            out.append(f"{name}: {_first_difference(a, b)}")
    if en.tables != zh.tables:
        if len(en.tables) != len(zh.tables):
            out.append(f"tables: English has {len(en.tables)}, Chinese {len(zh.tables)}")
        for i, (a, b) in enumerate(zip(en.tables, zh.tables)):
            if a != b:
                shape = f"{len(a)}x{len(a[0]) if a else 0} vs {len(b)}x{len(b[0]) if b else 0}"
                out.append(f"table {i + 1}: rows x columns or numeric cells differ ({shape}): "
                           f"{_first_difference(a, b)}")
    if en.links != zh.links:
        missing = sorted(set(en.links) - set(zh.links))
        extra = sorted(set(zh.links) - set(en.links))
        out.append(f"links: missing in Chinese {missing or 'none'}, only in Chinese {extra or 'none'}"
                   + ("" if missing or extra else " (same targets, different counts)"))
    if en.inline_code != zh.inline_code:
        missing = sorted(en.inline_code - zh.inline_code)
        extra = sorted(zh.inline_code - en.inline_code)
        out.append(f"inline code: missing in Chinese {missing or 'none'}, only in Chinese {extra or 'none'}")
    lost = sorted(n for n, c in en.numbers.items() if zh.numbers.get(n, 0) < 1)
    if lost:
        out.append(f"numbers of the English prose missing in Chinese: {lost}")
    return out


# ------------------------------------------------------------------------------------------ heading ids


def heading_texts(text: str) -> list[tuple[int, str]]:
    """(level, text) of every ATX heading outside code blocks, in order."""
    out = []
    for block in _split_blocks(text):
        if block[0] == "text" and (h := HEADING.match(block[1])):
            out.append((len(h.group("hashes")), h.group("text")))
    return out


def _plain(heading: str) -> str:
    """A heading's text as the toc extension slugifies it: markup and attribute lists removed."""
    heading = EXPLICIT_ID.sub("", heading)
    heading = re.sub(r"\s*\{[^}]*\}\s*$", "", heading)
    heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    codes: list[str] = []  # code spans keep their underscores and asterisks: set them aside meanwhile
    heading = INLINE_CODE.sub(lambda m: codes.append(m.group("code")) or f"\0{len(codes) - 1}\0", heading)
    heading = HTML_TAG.sub("", heading)
    heading = re.sub(r"(\*\*|__|\*|(?<!\w)_)(.+?)\1", r"\2", heading).replace("\\", "")
    return re.sub(r"\0(\d+)\0", lambda m: codes[int(m.group(1))], heading)


def heading_ids(text: str) -> list[str]:
    """The ids the book gives the page's headings, in order (Python-Markdown's toc slugs, made unique)."""
    from markdown.extensions.toc import slugify, unique

    seen: set[str] = set()
    ids = []
    for _, heading in heading_texts(text):
        m = EXPLICIT_ID.search(heading)
        ids.append(m.group("id") if m else unique(slugify(_plain(heading), "-"), seen))
        if m:
            seen.add(m.group("id"))
    return ids


def with_english_ids(chinese: str, english: str) -> str:
    """The Chinese page with each heading given its English twin's id, so that every anchor (#run-it)
    means the same section in both languages. Headings that have an id of their own keep it."""
    ids = heading_ids(english)
    out = []
    n = 0
    for block in _split_blocks_keep(chinese):
        if isinstance(block, str) and (h := HEADING.match(block)):
            if n < len(ids) and not EXPLICIT_ID.search(h.group("text")):
                block = f"{h.group('hashes')} {h.group('text')} {{ #{ids[n]} }}"
            n += 1
        out.append(block if isinstance(block, str) else block[0])
    return "\n".join(out) + ("\n" if chinese.endswith("\n") else "")


def _split_blocks_keep(text: str):
    """The lines of the text; a fenced block comes as a 1-tuple holding its lines joined, unchanged."""
    for block in _fenced(text):
        yield block if isinstance(block, str) else ("\n".join(block[1]),)


# ------------------------------------------------------------------------------------------ glossary


def glossary_topics(path: Path = GLOSSARY) -> list[dict]:
    """The glossary's topics, in order: id, en, zh (the topic's title) and terms (each as `glossary()` gives)."""
    import yaml

    topics = yaml.safe_load(path.read_text(encoding="utf-8"))
    for topic in topics:
        for e in topic["terms"]:
            e.setdefault("avoid", [])
            e.setdefault("others", [])
            e["topic"] = topic["id"]
    return topics


def glossary(path: Path = GLOSSARY) -> list[dict]:
    """The glossary's entries, topic by topic: en, zh, avoid (renderings the Chinese pages must not use),
    others (renderings met elsewhere, shown on the glossary page), en_note, zh_note, topic (its id)."""
    return [e for topic in glossary_topics(path) for e in topic["terms"]]


def prose_lines(text: str):
    """(line number, text) of each line a translator writes: every line but those of code blocks that stay
    English (a shell block's comments, a `text` diagram and a mermaid diagram are written in the page's
    language, so their lines count), with inline code blanked."""
    n = 0
    for block in _fenced(text):
        if isinstance(block, str):
            n += 1
            yield n, INLINE_CODE.sub(" ", block)
            continue
        m, lines = block
        lang = (m.group("info").split() or [""])[0]
        for line in lines:
            n += 1
            if lang in SHELL | {DIAGRAM, "mermaid"}:
                yield n, line


# ------------------------------------------------------------------------------------------ commands


def _pair_of(arg: str) -> Path:
    path = Path(arg)
    if path.is_absolute():
        path = path.resolve().relative_to(ROOT)
    english = english_of(path)
    if not (ROOT / english).is_file():
        raise SystemExit(f"no English page {english}")
    return english


def cmd_status(quiet: bool = False) -> int:
    states = [pair_state(p) for p in english_pages()]
    bad = [s for s in states if s.state not in ("current", "english only")]
    for s in states:
        if not quiet or s in bad:
            print(f"{s.state:<13} {s.english}" + (f"  ({s.detail})" if s.detail else ""))
    for p in orphans():
        print(f"{'orphan':<13} {p}  (no English page {twin(p)})")
    print(f"{len(states)} English pages: {sum(s.state == 'current' for s in states)} translated and current, "
          f"{len(bad)} to do" + (": python -m tools.i18n diff PAGE shows what changed" if bad else ""))
    return 1 if bad else 0


def english_at(blob: str) -> str | None:
    try:
        return subprocess.run(["git", "cat-file", "-p", blob], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def cmd_diff(page: str) -> int:
    english = _pair_of(page)
    state = pair_state(english)
    now = (ROOT / english).read_text(encoding="utf-8")
    if state.state == "missing":
        print(f"{twin(english)} does not exist: translate all of {english}")
        return 1
    stamp = read_stamp((ROOT / twin(english)).read_text(encoding="utf-8"))
    if stamp is None:
        print(f"{twin(english)} has no stamp: compare it with {english} as a whole")
        return 1
    then = english_at(stamp[1])
    if then is None:
        print(f"the English version {stamp[1]} is not in this repository's history: compare as a whole")
        return 1
    diff = list(difflib.unified_diff(then.splitlines(), now.splitlines(), f"{english} @ {stamp[1]}",
                                     f"{english} (now)", lineterm=""))
    print("\n".join(diff) if diff else f"{twin(english)} is current")
    return 0


def cmd_stamp(pages: list[str]) -> int:
    for page in pages:
        english = _pair_of(page)
        chinese = ROOT / twin(english)
        if not chinese.is_file():
            raise SystemExit(f"{twin(english)} does not exist yet")
        text = chinese.read_text(encoding="utf-8")
        chinese.write_text(with_stamp(text, stamp_line(english)), encoding="utf-8")
        problems = compare((ROOT / english).read_text(encoding="utf-8"), chinese.read_text(encoding="utf-8"), english)
        print(f"stamped {twin(english)}" + (f": but it does not match its English page yet:\n  - "
                                            + "\n  - ".join(problems) if problems else ""))
    return 0


def cmd_check(pages: list[str]) -> int:
    status = 0
    for page in pages or [str(p) for p in english_pages()]:
        english = _pair_of(page)
        chinese = ROOT / twin(english)
        if not chinese.is_file():
            continue
        problems = compare((ROOT / english).read_text(encoding="utf-8"), chinese.read_text(encoding="utf-8"), english)
        if problems:
            status = 1
            print(f"{twin(english)}:\n  - " + "\n  - ".join(problems))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.i18n", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("status", help="every pair: current, stale or missing")
    st.add_argument("-q", "--quiet", action="store_true", help="only the pairs that need work")
    sub.add_parser("diff", help="the English changes since the twin's stamp").add_argument("page")
    sub.add_parser("stamp", help="record the English version a twin translates").add_argument("pages", nargs="+")
    sub.add_parser("check", help="what a pair must share, page by page").add_argument("pages", nargs="*")
    args = parser.parse_args(argv)
    if args.cmd == "status":
        return cmd_status(args.quiet)
    if args.cmd == "diff":
        return cmd_diff(args.page)
    if args.cmd == "stamp":
        return cmd_stamp(args.pages)
    return cmd_check(args.pages)


if __name__ == "__main__":
    sys.exit(main())
