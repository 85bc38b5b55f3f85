"""Practice problems (design, section 7): every reference solution passes, every starter fails, and the
shared runner reports failures, examples and time limits the way both judges rely on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tools.tree import ROOT

sys.path.insert(0, str(ROOT / "practice"))

import judge  # noqa: E402
from runner import run  # noqa: E402

PROBLEMS = judge.all_problems()
TESTS = "from solution import f\nEXAMPLES = ['test_one']\n\ndef test_one():\n    assert f(1) == 2, 'f(1) should be 2'\n\n" \
        "def test_two():\n    assert f(2) == 4\n"


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.id for p in PROBLEMS])
def test_problem_is_sound(problem):
    assert not judge.check_problem(problem)


def test_every_chapter_so_far_has_problems():
    chapters = {p.chapter for p in PROBLEMS}
    assert chapters, "no practice problems"


def test_runner_reports_the_failing_assertion():
    result = run("def f(x):\n    return x + 1\n", TESTS)
    assert not result["ok"]
    assert [r["passed"] for r in result["results"]] == [True, False]
    assert result["results"][1]["line"] == 8
    assert result["results"][1]["message"] == "failed: assert f(2) == 4 (got 3, expected 4)", \
        "a bare assert shows its source line and both sides"


def test_runner_shows_both_sides_of_a_bare_comparison_once():
    calls = "calls = []\ndef f(x):\n    calls.append(x)\n    return [x]\n"
    tests = ("from solution import f, calls\n\ndef test_eq():\n    assert f(1) == [2]\n\n"
             "def test_in():\n    assert 5 in f(1)\n\ndef test_called_once():\n    assert calls == [1, 1], calls\n")
    got = {r["name"]: r["message"] for r in run(calls, tests)["results"]}
    assert got["test_eq"] == "failed: assert f(1) == [2] (got [1], expected [2])", got
    assert got["test_in"] == "failed: assert 5 in f(1) (left side 5, right side [1])", got
    assert got["test_called_once"] == "", f"each side is evaluated once, as written: {got}"


def test_runner_examples_only_and_load_errors():
    assert [r["name"] for r in run("def f(x):\n    return 2 * x\n", TESTS, examples_only=True)["results"]] == ["test_one"]
    broken = run("def f(x) return x\n", TESTS)
    assert not broken["ok"] and "does not load" in broken["error"]


def test_runner_stops_an_infinite_loop():
    result = run("def f(x):\n    while True:\n        pass\n", TESTS, time_limit=0.3)
    assert not result["ok"]
    assert all("time limit" in r["message"] for r in result["results"])


def test_judge_cli_check():
    proc = subprocess.run([sys.executable, "practice/judge.py", "check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


STARTER_TESTS = "from solution import f\n\ndef test_one():\n    assert f(1) == 2\n"


def test_runner_says_the_starter_is_unchanged_and_where():
    result = run("def f(x):\n    '''Double x.'''\n    raise NotImplementedError\n", STARTER_TESTS)
    failure = result["results"][0]
    assert failure["message"] == "your function f() still raises NotImplementedError (starter unchanged)", failure
    assert failure["line"] == 4, "the tests.py line that called the learner's code"
    assert failure["at"] == {"file": "solution.py", "line": 3, "code": "raise NotImplementedError", "function": "f"}, failure


def test_runner_points_at_the_learners_line_for_any_exception():
    source = "def helper(values):\n    return values[3]\n\n\ndef f(x):\n    return helper([x])\n"
    failure = run(source, STARTER_TESTS)["results"][0]
    assert failure["message"] == "IndexError: list index out of range", failure
    assert failure["at"] == {"file": "solution.py", "line": 2, "code": "return values[3]", "function": "helper"}, \
        f"the innermost line of the learner's code should be shown, got {failure['at']}"


def test_runner_has_no_learner_line_for_a_failed_assertion_in_the_tests():
    failure = run("def f(x):\n    return x\n", STARTER_TESTS)["results"][0]
    assert failure["at"] is None and failure["line"] == 4, failure


def test_runner_load_error_names_the_learners_line():
    result = run("import math\n\nx = 1 / 0\n", STARTER_TESTS)
    assert result["error"] == "your code does not load: ZeroDivisionError: division by zero (solution.py line 3: x = 1 / 0)"
    syntax = run("def f(x):\n    return x +\n", STARTER_TESTS)
    assert syntax["error_at"]["line"] == 2 and "(solution.py line 2: return x +)" in syntax["error"], syntax


def test_local_judge_prints_the_learners_file_and_line(tmp_path):
    problem = "ch05-flatten-batch"
    mine = tmp_path / "mine.py"
    mine.write_text(judge.load(problem).source("starter.py"))
    proc = subprocess.run([sys.executable, "practice/judge.py", problem, "--file", str(mine)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "still raises NotImplementedError (starter unchanged)" in proc.stdout, proc.stdout
    assert f"in your code: {mine} line" in proc.stdout, proc.stdout
