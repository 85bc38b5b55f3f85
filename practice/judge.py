"""Practice problems, judged locally (the browser judge on the docs site runs the same tests).

    python practice/judge.py list               # every problem: id, chapter, difficulty, solved?
    python practice/judge.py start <id>          # copy the starter to practice/mine/<id>.py and print the statement
    python practice/judge.py <id> [--file F]     # judge your file (default practice/mine/<id>.py)
    python practice/judge.py <id> --examples     # only the example tests
    python practice/judge.py check               # maintainers: every solution passes, every starter fails
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from runner import run, where  # noqa: E402

PROBLEMS = HERE / "problems"
MINE = HERE / "mine"
EXPLANATION_MARK = "<!-- explanation -->"
DIFFICULTIES = ("easy", "medium", "hard")


@dataclass
class Problem:
    id: str
    title: str
    chapter: int
    difficulty: str
    tags: list[str] = field(default_factory=list)
    statement: str = ""
    explanation: str = ""

    @property
    def folder(self) -> Path:
        return PROBLEMS / self.id

    def source(self, name: str) -> str:
        return (self.folder / name).read_text()

    def localized(self, lang: str) -> "Problem":
        """The problem as a page in `lang` shows it: title, statement and explanation from problem.<lang>.md
        (its front matter holds the title only; chapter, difficulty and tags stay those of problem.md)."""
        path = self.folder / f"problem.{lang}.md"
        if lang == "en" or not path.exists():
            return self
        fields, body = parse_front_matter(path.read_text(), str(path))
        statement, _, explanation = body.partition(EXPLANATION_MARK)
        return Problem(self.id, fields.get("title", self.title), self.chapter, self.difficulty, self.tags,
                       statement.strip(), explanation.strip())


def parse_front_matter(text: str, where: str) -> tuple[dict, str]:
    """`---`-delimited `key: value` lines (tags as [a, b]); returns (fields, body)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---" or "---" not in [ln.strip() for ln in lines[1:]]:
        raise ValueError(f"{where}: problem.md must start with a --- front matter block")
    end = 1 + [ln.strip() for ln in lines[1:]].index("---")
    fields = {}
    for line in lines[1:end]:
        if line.strip():
            key, _, value = line.partition(":")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = [v.strip() for v in value[1:-1].split(",") if v.strip()]
            fields[key.strip()] = value
    return fields, "\n".join(lines[end + 1 :])


def load(problem_id: str) -> Problem:
    path = PROBLEMS / problem_id / "problem.md"
    if not path.exists():
        raise ValueError(f"no problem {problem_id!r} (python practice/judge.py list shows them)")
    fields, body = parse_front_matter(path.read_text(), str(path))
    statement, _, explanation = body.partition(EXPLANATION_MARK)
    problem = Problem(problem_id, fields["title"], int(fields["chapter"]), fields["difficulty"],
                      list(fields.get("tags", [])), statement.strip(), explanation.strip())
    if problem.difficulty not in DIFFICULTIES:
        raise ValueError(f"{path}: difficulty must be one of {DIFFICULTIES}")
    for name in ("starter.py", "solution.py", "tests.py"):
        if not (problem.folder / name).exists():
            raise ValueError(f"{problem.folder}: missing {name}")
    return problem


def all_problems() -> list[Problem]:
    found = [load(p.name) for p in sorted(PROBLEMS.iterdir()) if (p / "problem.md").exists()]
    return sorted(found, key=lambda p: (p.chapter, DIFFICULTIES.index(p.difficulty), p.id))


def report(result: dict, quiet: bool = False) -> None:
    if result["error"]:
        print(f"  ERROR  {result['error']}")
        return
    for r in result["results"]:
        if r["passed"]:
            if not quiet:
                print(f"  pass   {r['name']}")
        else:
            called = f" (tests.py line {r['line']})" if r["line"] else ""
            print(f"  FAIL   {r['name']}{called}: {r['message']}")
            if r.get("at"):
                print(f"         in your code: {where(r['at'])}")
    passed = sum(r["passed"] for r in result["results"])
    print(f"  {passed}/{len(result['results'])} tests passed")


def cmd_list() -> int:
    for p in all_problems():
        mine = MINE / f"{p.id}.py"
        state = ""
        if mine.exists():
            state = "solved" if run(mine.read_text(), p.source("tests.py"))["ok"] else "started"
        print(f"ch{p.chapter:02d}  {p.difficulty:<7} {p.id:<32} {p.title}  {state}")
    return 0


def cmd_start(problem_id: str) -> int:
    p = load(problem_id)
    MINE.mkdir(exist_ok=True)
    target = MINE / f"{p.id}.py"
    if target.exists():
        print(f"{target.relative_to(HERE.parent)} already exists: keeping your work")
    else:
        shutil.copy(p.folder / "starter.py", target)
        print(f"wrote {target.relative_to(HERE.parent)}")
    print(f"\n# {p.title}  (chapter {p.chapter}, {p.difficulty})\n\n{p.statement}\n")
    print(f"judge it with: python practice/judge.py {p.id}")
    return 0


def cmd_judge(problem_id: str, file: str | None, examples: bool) -> int:
    p = load(problem_id)
    path = Path(file) if file else MINE / f"{p.id}.py"
    if not path.exists():
        print(f"{path} does not exist: run `python practice/judge.py start {p.id}` first")
        return 2
    print(f"{p.id}: judging {path}{' (examples only)' if examples else ''}")
    result = run(path.read_text(), p.source("tests.py"), examples_only=examples, solution_file=str(path))
    report(result)
    return 0 if result["ok"] else 1


def check_problem(p: Problem) -> list[str]:
    """Maintainers' check of one problem: what is wrong with it (empty when fine)."""
    problems = []
    tests = p.source("tests.py")
    solved = run(p.source("solution.py"), tests)
    if not solved["ok"]:
        failing = [r["name"] + ": " + r["message"] for r in solved["results"] if not r["passed"]]
        problems.append(f"{p.id}: the reference solution fails: {solved['error'] or failing}")
    started = run(p.source("starter.py"), tests)
    if started["ok"]:
        problems.append(f"{p.id}: the starter passes every test")
    examples = run(p.source("solution.py"), tests, examples_only=True)["results"]
    if not examples:
        problems.append(f"{p.id}: tests.py marks no EXAMPLES")
    if len(solved["results"]) < 4:
        problems.append(f"{p.id}: only {len(solved['results'])} tests (edge cases wanted)")
    if not p.explanation:
        problems.append(f"{p.id}: problem.md has no explanation after {EXPLANATION_MARK}")
    return problems


def cmd_check() -> int:
    found = all_problems()
    problems = [msg for p in found for msg in check_problem(p)]
    for msg in problems:
        print("FAIL", msg)
    print(f"{len(found)} problems checked, {len(problems)} issues")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", help="list | start <id> | check | <problem id>")
    ap.add_argument("id", nargs="?")
    ap.add_argument("--file")
    ap.add_argument("--examples", action="store_true")
    a = ap.parse_args(argv)
    try:
        if a.command == "list":
            return cmd_list()
        if a.command == "check":
            return cmd_check()
        if a.command == "start":
            if not a.id:
                ap.error("start needs a problem id")
            return cmd_start(a.id)
        return cmd_judge(a.command, a.file, a.examples)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
