"""The learner-facing tooling around the chapters: which stub `make check` blames, what its report shows,
planned chapters, a bad MODEL, reset/restore, the skeleton sync check and the CPU thread count."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools import course, skeleton, tree
from tools.models import KNOWN
from tools.tree import PLANNED, ROOT, SOLUTIONS, get_chapter


def _record(test: str, outcome: str, stubs: list[str], frames: list[str] | None = None) -> dict:
    return {"test": test, "outcome": outcome, "stubs": stubs, "frames": frames or []}


# ----------------------------------------------------------------------------- blame
def test_failure_blames_the_stub_in_its_traceback():
    records = [_record("t1", "failed", ["A.f", "A.g"], frames=["helper", "A.g", "A.g.inner", "torch.cat"])]
    assert course.blame(records, ["A.f", "A.g"]) == {"t1": ["A.g"]}, "the stub whose code raised is to blame"


def test_failure_blames_a_stub_convicted_by_its_own_test():
    records = [_record("both", "failed", ["A.f", "A.g"]), _record("g alone", "failed", ["A.g"]),
               _record("f alone", "passed", ["A.f"])]
    assert course.blame(records, ["A.f", "A.g"])["both"] == ["A.g"], "A.g fails a test of its own: blame it alone"


def test_failure_blames_the_only_stub_the_test_entered():
    # make check records which stubs a test entered: a test marked with three that ran one blames that one.
    stubs = ["Req.complete_one", "Req.extend_len", "Req.remain_len"]
    records = [{**_record("walk", "failed", stubs), "entered": ["Req.complete_one"]},
               {**_record("lengths", "passed", stubs[1:]), "entered": stubs[1:]}]
    assert course.blame(records, stubs) == {"walk": ["Req.complete_one"]}


def test_a_stubs_own_not_implemented_error_blames_it_even_from_a_server():
    record = {**_record("served", "failed", ["to_tokenize_msg", "complete", "events"]),
              "error": "NotImplementedError", "message": "TODO(ch15): complete"}  # a worker's 500 body, read back
    assert course.blame([record], ["to_tokenize_msg", "complete", "events"]) == {"served": ["complete"]}


def test_a_failure_nothing_ties_to_one_stub_is_unattributed():
    records = [_record("t", "failed", ["A.f", "A.g"]), _record("f", "passed", ["A.f"]), _record("g", "failed", ["A.g"])]
    records[2].update(error="AssertionError", message="g is wrong")
    assert course.blame(records, ["A.f", "A.g"]) == {"t": [], "g": ["A.g"]}, \
        "t ran two stubs and fails with an error of its own: no guess (A.g failing elsewhere does not make it t's)"


def test_a_stub_failing_its_own_tests_is_not_cleared_by_a_neighbour_pinned_elsewhere():
    """Chapter 9 with two bugs: lock_handle's "not locked" error and cache_req's row re-pointing. lock_handle fails
    its own test; cache_req's tests (marked with every stub they reach, lock_handle included) fail differently. An
    old rule pinned every failure on lock_handle and showed cache_req done. cache_req's failures are not
    lock_handle's (another error), and nothing ties them to one of the stubs they ran: cache_req is unclear, never
    done; evict, which they did not run, is done."""
    tree = ["RadixCache._split", "RadixCache._walk", "RadixCache.insert_prefix"]
    every = [*tree, "RadixCache.lock_handle", "RadixCache.evict", "CacheManager.cache_req"]
    entered = [*tree, "RadixCache.lock_handle", "CacheManager.cache_req"]
    raised = dict(error="Failed", message="DID NOT RAISE RuntimeError")

    def rec(test, outcome, stubs, **kw):
        return {**_record(test, outcome, stubs), **kw}

    records = [rec("locks", "failed", ["RadixCache.lock_handle"], **raised),
               rec("lru", "failed", [*tree, "RadixCache.lock_handle", "RadixCache.evict"], **raised),
               rec("split_locks", "passed", [*tree, "RadixCache.lock_handle", "RadixCache.evict"]),
               rec("evict", "passed", ["RadixCache.evict"]), rec("tree", "passed", tree),
               *[rec(f"cache_req[{i}]", "failed", every, entered=entered, error="AssertionError",
                     message="the second request now reads the cached copy") for i in range(2)],
               *[rec(f"hf[{i}]", "passed", every, entered=every) for i in range(4)],
               *[rec(f"cached_prompt[{i}]", "failed", every, entered=entered, error="AssertionError",
                     message="second run: got [1]") for i in range(2)]]
    blamed = course.blame(records, every)
    assert blamed["lru"] == ["RadixCache.lock_handle"], "the same error as lock_handle's own failure: its bug"
    for test in ("cache_req[0]", "cached_prompt[1]"):
        assert blamed[test] == [], f"{test} blames {blamed[test]}: nothing ties it to one stub"
    stubs = [skeleton.Stub("ch09", name, "m.py") for name in every]
    rows = {name: status for name, status, _, _ in course.stub_status(stubs, records, None)}
    assert rows["RadixCache.lock_handle"] == "failing" and rows["CacheManager.cache_req"] == "unclear", rows
    assert rows["RadixCache.evict"] == "done", rows


def test_a_timeout_is_not_blamed_on_the_stub_it_was_stopped_in():
    """Chapter 7 with reserved_slots one short: its own test fails, and the generate test loops until make check's
    time limit stops it inside LLM.generate, which is correct. Where a loop is stopped says nothing of its bug: the
    timeout is unattributed, and LLM.generate is not failing."""
    stubs = ["LLM.generate", "DecodeManager.reserved_slots", "Scheduler.schedule_next_batch"]
    timeout = dict(error="Failed", message="Timeout (>120.0s) from pytest-timeout.")
    records = [{**_record("reserve", "failed", ["DecodeManager.reserved_slots"]), "error": "AssertionError",
                "message": "assert 1 == (3 + 0)"},
               {**_record("generate", "failed", stubs, frames=["LLM.generate", "Scheduler.schedule_next_batch",
                                                               "torch.cat"]), "entered": stubs, **timeout},
               {**_record("alone", "failed", stubs, frames=["LLM.generate"]), "entered": ["LLM.generate"], **timeout}]
    blamed = course.blame(records, stubs)
    assert blamed == {"reserve": ["DecodeManager.reserved_slots"], "generate": [], "alone": ["LLM.generate"]}, \
        f"{blamed}: a timeout is pinned only on the one stub its test ran"


def _chapter_23(server_error: str = "a burst of 8 on 100 slots retracts (optimistic admission): {...}") -> list[dict]:
    """Chapter 23's report on a learner's correct tree on a loaded machine: every test passes but the server test,
    which ran five of the six stubs in its own process before it failed."""
    run = ["DecodeManager.reserved_slots", "pick_victim", "Admission.make_room", "Scheduler.retract",
           "NewTokenRatio.after_retraction"]
    records = [_record("ratio", "passed", ["NewTokenRatio.after_retraction"]),
               _record("reserve", "passed", ["DecodeManager.reserved_slots"]),
               _record("victim", "passed", ["pick_victim"]), _record("held", "passed", ["CacheManager.held_pages"]),
               *[{**_record(f"retract[{i}]", "passed", run), "entered": run} for i in range(6)],
               {**_record("server", "failed", run), "entered": run}]
    records[-1].update(error="AssertionError", message=server_error, explanation=["assert 0 > 0"])
    return records


CH23_STUBS = ["NewTokenRatio.after_retraction", "DecodeManager.reserved_slots", "pick_victim",
              "CacheManager.held_pages", "Admission.make_room", "Scheduler.retract"]


def test_a_correct_stub_is_never_failing_because_of_an_unrelated_failure():
    """The chapter-23 report that blamed two correct stubs: a server test failed only under load, and the old rule
    named the marked stubs that passed least often. Now the failure is unattributed and no stub is failing."""
    records = _chapter_23()
    assert course.blame(records, CH23_STUBS) == {"server": []}
    rows = {name: (status, detail) for name, status, detail, _ in
            course.stub_status([skeleton.Stub("ch23", n, "m.py") for n in CH23_STUBS], records, None)}
    assert not [name for name, (status, _) in rows.items() if status == "failing"], rows
    assert rows["CacheManager.held_pages"] == ("done", "1 test passes"), rows
    assert rows["pick_victim"] == ("unclear", "7 tests pass; 1 more fails, unattributed (below)"), rows


def test_a_real_bug_in_a_stub_is_still_blamed(monkeypatch, capsys):
    """The same chapter with a wrong pick_victim: its own test fails, a test of several stubs fails with the same
    error and another inside pick_victim's code: all three are pick_victim's; the stubs whose tests pass are done."""
    records = _chapter_23(server_error="request 3: the server answered 'ab', the offline engine 'ac'")
    wrong = dict(error="AssertionError", message="pick_victim chose request 2, want request 5")
    records[2].update(outcome="failed", **wrong)
    records[4].update(outcome="failed", **wrong)
    records[5].update(outcome="failed", frames=["Admission.make_room", "pick_victim"], error="IndexError",
                      message="list index out of range")
    blamed = course.blame(records, CH23_STUBS)
    assert blamed == {"victim": ["pick_victim"], "retract[0]": ["pick_victim"], "retract[1]": ["pick_victim"],
                      "server": []}, blamed
    rows = {name: status for name, status, _, _ in
            course.stub_status([skeleton.Stub("ch23", n, "m.py") for n in CH23_STUBS], records, None)}
    assert rows["pick_victim"] == "failing" and rows["CacheManager.held_pages"] == "done", rows
    code, out = _check_output(monkeypatch, capsys, 1, records, stubs=CH23_STUBS)
    assert code == 1 and "unattributed failure: server: AssertionError: request 3: the server answered" in out, out
    assert "it ran DecodeManager.reserved_slots, pick_victim, Admission.make_room" in out, out


def test_check_names_an_unattributed_failure_and_blames_no_stub(monkeypatch, capsys):
    code, out = _check_output(monkeypatch, capsys, 1, _chapter_23(), stubs=CH23_STUBS)
    assert code == 1 and "failing" not in out, out
    assert "unattributed failure: server: AssertionError: a burst of 8 on 100 slots retracts" in out, out


def test_skipped_tests_are_not_counted_against_a_stub():
    records = [_record("gpu", "skipped", ["A.f"]), _record("cpu", "passed", ["A.f"]),
               _record("gpu only", "skipped", ["A.g"])]
    records[2]["message"] = "needs a CUDA GPU"
    rows = {name: (status, detail) for name, status, detail, _ in
            course.stub_status([skeleton.Stub("ch17", n, "m.py") for n in ("A.f", "A.g")], records, None)}
    assert rows["A.f"] == ("done", "1 test passes"), rows
    assert rows["A.g"] == ("untested", "needs a CUDA GPU (its 1 test skips here)"), rows


def test_a_stub_whose_tests_all_skip_says_what_would_run_them(tmp_path):
    """On a machine without Triton (a Mac) a kernel stub's tests all skip: its row names what to install, whether
    the learner has started it or not, and a started stub with a passing test is done as before."""
    reason = "needs Triton (Linux only): pip install triton==3.6.0"
    records = [{**_record(f"kernel[{i}]", "skipped", ["K.k"]), "message": reason} for i in range(2)]
    records += [_record("select", "passed", ["B.b"]), {**_record("engine", "skipped", ["B.b"]), "message": reason}]
    (tmp_path / "m.py").write_text('raise NotImplementedError("TODO(ch17): K.k")\n')
    stubs = [skeleton.Stub("ch17", name, "m.py") for name in ("K.k", "B.b")]
    fresh = {name: (status, detail) for name, status, detail, _ in course.stub_status(stubs[:1], records, tmp_path)}
    assert fresh["K.k"] == ("not started", f"{reason} (its 2 tests skip here)"), fresh
    rows = {name: (status, detail) for name, status, detail, _ in course.stub_status(stubs, records, None)}
    assert rows["K.k"] == ("untested", f"{reason} (its 2 tests skip here)"), rows
    assert rows["B.b"] == ("done", "1 test passes"), rows


def test_check_table_shows_blamed_stub_failing_and_its_neighbours_done():
    stubs = [skeleton.Stub("ch01", name, "m.py") for name in ("A.f", "A.g")]
    records = [_record("t_fg", "failed", ["A.f", "A.g"], frames=["A.f"]), _record("t_g", "passed", ["A.g"])]
    records[0].update(error="AssertionError", message="assert 1 == 2", explanation=["assert 1 == 2", "dtype differs"])
    rows = {name: (status, explanation) for name, status, _, explanation in course.stub_status(stubs, records, None)}
    assert rows["A.f"] == ("failing", ["dtype differs"]), f"A.f's row: {rows['A.f']}"
    assert rows["A.g"][0] == "done", f"A.g is not to blame: {rows['A.g']}"


# ----------------------------------------------------------------------------- the pytest plugin
def test_stub_report_records_frames_and_pytest_explanation(tmp_path):
    (tmp_path / "engine.py").write_text(textwrap.dedent("""
        import torch

        class Req:
            def tokens(self):
                return torch.tensor([10, 11], dtype=torch.float32)

            def complete_one(self):
                def bump(x):
                    raise IndexError("past the end")
                bump(1)
    """))
    (tmp_path / "test_engine.py").write_text(textwrap.dedent("""
        import torch
        from engine import Req

        def test_dtype():
            t = Req().tokens()
            assert (t.tolist() == [10, 11] and t.dtype == torch.int32)

        def test_raises():
            Req().complete_one()
    """))
    report = tmp_path / "report.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    subprocess.run([sys.executable, "-m", "pytest", "-p", "tools.stubreport", f"--stub-report={report}", "-q",
                    "-p", "no:cacheprovider", "--tb=short", str(tmp_path)], cwd=tmp_path, env=env,
                   capture_output=True, text=True, timeout=300)
    records = {r["test"].split("::")[-1]: r for r in map(json.loads, report.read_text().splitlines())}
    explanation = "\n".join(records["test_dtype"]["explanation"])
    assert "torch.float32" in explanation, f"pytest's explanation names the dtype: {explanation!r}"
    frames = records["test_raises"]["frames"]
    assert frames[-2:] == ["Req.complete_one", "Req.complete_one.bump"], f"frames of the failure: {frames}"


def test_stub_report_records_the_stubs_each_test_entered(tmp_path):
    """With --stub-entries (make check's): the marked stubs a test's setup and call entered, in any thread of the
    test's process; a function of the test file with a stub's name is not the stub."""
    (tmp_path / "engine.py").write_text(textwrap.dedent("""
        class Req:
            def tokens(self):
                return [1, 2]

            def complete_one(self):
                return self.tokens() + [3]

            def spare(self):
                return 0
    """))
    (tmp_path / "test_engine.py").write_text(textwrap.dedent("""
        import threading

        import pytest
        from engine import Req as Engine

        class Req:  # the test's own: its tokens is not the stub Req.tokens
            def tokens(self):
                return []

        @pytest.fixture
        def spared():
            return Engine().spare()

        @pytest.mark.stubs("Req.tokens", "Req.complete_one")
        def test_tokens():
            Req().tokens()
            assert Engine().tokens() == [1]

        @pytest.mark.stubs("Req.spare")
        def test_fixture(spared):
            assert spared == 0

        @pytest.mark.stubs("Req.tokens", "Req.complete_one")
        def test_thread():
            worker = threading.Thread(target=Engine().complete_one)
            worker.start()
            worker.join()

        def test_none():
            Req().tokens()
    """))
    report = tmp_path / "report.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    subprocess.run([sys.executable, "-m", "pytest", "-p", "tools.stubreport", f"--stub-report={report}",
                    "--stub-entries", "-q", "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path, env=env,
                   capture_output=True, text=True, timeout=300)
    records = {r["test"].split("::")[-1]: r for r in map(json.loads, report.read_text().splitlines())}
    got = {name: r.get("entered") for name, r in records.items()}
    assert got == {"test_tokens": ["Req.tokens"], "test_fixture": ["Req.spare"],
                   "test_thread": ["Req.complete_one", "Req.tokens"], "test_none": []}, got
    assert course.blame(list(records.values()), ["Req.tokens", "Req.complete_one", "Req.spare"]) == \
        {records["test_tokens"]["test"]: ["Req.tokens"]}, "the failing test entered one of its two stubs: blame it"


def test_stub_report_counts_skips_at_setup_and_times_tests(tmp_path):
    (tmp_path / "test_skips.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.skip(reason="needs a CUDA GPU")
        def test_marked():
            pass

        def test_inside():
            pytest.skip("no model here")

        def test_runs():
            pass
    """))
    report = tmp_path / "report.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    subprocess.run([sys.executable, "-m", "pytest", "-p", "tools.stubreport", f"--stub-report={report}", "-q",
                    "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                   timeout=300)
    records = {r["test"].split("::")[-1]: r for r in map(json.loads, report.read_text().splitlines())}
    got = {name: (r["outcome"], r.get("message")) for name, r in records.items()}
    assert got == {"test_marked": ("skipped", "needs a CUDA GPU"), "test_inside": ("skipped", "no model here"),
                   "test_runs": ("passed", None)}, got
    assert all(r["seconds"] >= 0 for r in records.values())


def _check_output(monkeypatch, capsys, code: int, records: list[dict], example_code: int = 0,
                  stubs: list[str] | None = None) -> tuple[int, str]:
    """cmd_check's report for a suite run that gave (code, records), and an example that exits with example_code;
    `stubs` stand for the chapter's."""
    if stubs is not None:
        monkeypatch.setattr(skeleton, "stubs_of", lambda ch: [skeleton.Stub(ch.tag, name, "m.py") for name in stubs])
    monkeypatch.setattr(course, "assemble", lambda n, kind: ROOT / "build" / "ref" / "ch03")
    monkeypatch.setattr(course, "run_suite", lambda *a, **kw: (code, records, ""))
    monkeypatch.setattr(course, "cmd_run", lambda *a, **kw: print("example output") or example_code)
    result = course.cmd_check(3, mine=False, sol=True, verbose=False)
    return result, capsys.readouterr().out


def test_check_says_plainly_when_the_suite_passes_but_the_example_fails(monkeypatch, capsys):
    passed = [_record(f"t{i}", "passed", []) for i in range(3)]
    code, out = _check_output(monkeypatch, capsys, 0, passed, example_code=1)
    assert code == 1 and "chapter 3 is not passing yet: its tests pass, but its example" in out, out
    assert "failed (exit code 1" in out and "chapter 3 passes" not in out, out
    code, out = _check_output(monkeypatch, capsys, 0, passed)
    assert code == 0 and "chapter 3 passes: its tests and its example" in out, out


def test_check_names_the_stubs_it_could_not_check_on_this_machine(monkeypatch, capsys):
    """A stub whose every test skipped (a Triton kernel on a Mac) is named at the end with what it needs; the
    chapter passes what runs here. Stubs whose tests ran are not named."""
    reason = "needs Triton (Linux only; this machine is macOS arm64): run it on Linux or in WSL2"
    records = [_record("layer", "passed", ["LlamaDecoderLayer.forward", "RopeAttn.forward"]),
               *[{**_record(f"kernel{i}", "skipped", ["merge_weights"]), "message": reason} for i in range(2)]]
    code, out = _check_output(monkeypatch, capsys, 0, records)
    row = next(line for line in out.splitlines() if line.startswith("merge_weights "))
    assert code == 0 and row.split()[1] == "untested" and row.endswith(f"{reason} (its 2 tests skip here)"), out
    assert "chapter 3 passes what runs on this machine" in out and "Not checked here: merge_weights (" in out, out


def test_check_counts_skips_and_gives_each_reason_once(monkeypatch, capsys):
    records = [_record("a", "passed", []), *[_record(f"gpu{i}", "skipped", []) for i in range(4)]]
    for r in records[1:]:
        r["message"] = "needs a CUDA GPU and MINISGL_GPU_TESTS=1"
    _, out = _check_output(monkeypatch, capsys, 0, records)
    assert "tests: 1 passed, 0 failed, 4 skipped" in out, out
    assert out.count("needs a CUDA GPU") == 1 and "4 skipped: needs a CUDA GPU and MINISGL_GPU_TESTS=1" in out, out


def test_check_names_a_timeout_as_such(monkeypatch, capsys):
    record = _record("tests/test_ch03_models.py::test_loop", "failed", ["A.f"])
    record.update(error="Failed", message="Timeout (>120.0s) from pytest-timeout.")
    monkeypatch.delenv("MINISGL_TEST_TIMEOUT", raising=False)
    reason = course._failure_reason(record)
    assert reason.startswith("test_loop: still running after 120 s") and "MINISGL_TEST_TIMEOUT" in reason, reason


# ----------------------------------------------------------------------------- planned chapters, MODEL
def test_planned_chapters_are_not_built():
    built = {int(d.name[2:4]) for d in SOLUTIONS.glob("ch[0-9][0-9]_*")}
    assert not built & set(PLANNED), f"chapters both planned and built: {sorted(built & set(PLANNED))}"


def _course(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.course", *args], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["check", "run", "diff", "reset"])
def test_planned_chapter_says_so(command):
    if not PLANNED:
        pytest.skip("every chapter of the plan is built")
    planned = min(PLANNED)  # whichever chapters are built by now
    proc = _course(command, str(planned))
    assert proc.returncode == 2, f"exit code {proc.returncode}: {proc.stdout}{proc.stderr}"
    assert f"chapter {planned} is planned (not built yet)" in proc.stderr, proc.stderr


def test_missing_model_is_one_line_at_once(tmp_path, monkeypatch, capsys):
    """A bad MODEL is refused in one line before anything imports torch or starts a child process (which would spend
    seconds importing it): a torch that cannot be imported, first on the path, changes nothing in the answer, and
    in-process no process is started. No clock: a loaded machine answers the same."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text('raise ImportError("torch was imported")\n')
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    proc = _course("example", "generate", MODEL="/nonexistent/model", PYTHONPATH=path)
    assert proc.returncode == 2, f"exit code {proc.returncode}: {proc.stdout}{proc.stderr}"
    assert proc.stderr.strip().splitlines() == [
        f"error: MODEL=/nonexistent/model: no such fixture or directory (fixtures: {', '.join(KNOWN)})"
    ], f"one line, no traceback, torch never imported: {proc.stderr}"
    monkeypatch.setenv("MODEL", "/nonexistent/model")
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: pytest.fail(f"a process was started: {a}"))
    assert course.main(["example", "generate"]) == 2 and "no such fixture" in capsys.readouterr().err


def test_serve_refuses_a_tree_without_a_server_and_a_missing_model_at_once():
    early = _course("serve", "--ch", "3", "--port", "1")
    assert early.returncode == 2 and early.stderr.strip().splitlines() == [
        "error: chapter 3's tree has no server: it arrives in chapter 15 (make serve CH=15 or later, or no CH for "
        "the finished engine)"], f"exit code {early.returncode}: {early.stdout}{early.stderr}"
    proc = _course("serve", "--max-running-reqs", "4", MODEL="/nonexistent/model")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: MODEL=/nonexistent/model: no such fixture or directory (fixtures: {', '.join(KNOWN)})"
    ], f"server flags pass through, and a bad MODEL is one line: {proc.stdout}{proc.stderr}"


# ----------------------------------------------------------------------------- reset / restore, sync check
@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A copy of chapter 1's skeleton as the learner's chapters/, and backups under tmp_path."""
    ch = get_chapter(1)
    shutil.copytree(ch.skeleton_dir, tmp_path / "chapters" / ch.slug)
    monkeypatch.setattr(tree, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(course, "BACKUPS", tmp_path / "backups")
    return get_chapter(1)


def test_reset_keeps_no_backup_of_a_pristine_chapter(workspace):
    course.cmd_reset(1)
    assert course.backups_of(workspace) == [], "nothing differed from the skeleton: no backup"


def test_restore_brings_back_what_reset_saved(workspace):
    core = workspace.skeleton_dir / "minisgl" / "core.py"
    pristine = core.read_text()
    core.write_text(pristine + "# my work\n")
    course.cmd_reset(1)
    assert core.read_text() == pristine, "reset restores the skeleton"
    assert len(course.backups_of(workspace)) == 1
    assert course.cmd_restore(1) == 0
    assert core.read_text() == pristine + "# my work\n", "restore brings back the learner's file"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_sync_check_ignores_a_learners_edit_but_not_a_committed_change(workspace):
    repo = workspace.skeleton_dir.parent
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "skeletons")
    assert skeleton.out_of_sync(workspace) == [], "the committed skeleton is in sync"
    core = workspace.skeleton_dir / "minisgl" / "core.py"
    core.write_text(core.read_text() + "# the learner's work\n")
    assert skeleton.out_of_sync(workspace) == [], "a learner's edit in chapters/ must not fail the sync check"
    _git(repo, "add", "-A")  # what git holds now differs from what the solutions generate
    assert skeleton.out_of_sync(workspace) == [f"{workspace.slug}/minisgl/core.py: differs from its solution"]


def test_sync_check_without_git_reads_the_files(workspace):
    assert skeleton.out_of_sync(workspace) == []
    (workspace.skeleton_dir / "minisgl" / "core.py").write_text("edited\n")
    assert skeleton.out_of_sync(workspace) == [f"{workspace.slug}/minisgl/core.py: differs from its solution"]


# ----------------------------------------------------------------------------- CPU threads
def test_cpu_threads_honours_the_setting_and_fits_the_machine(monkeypatch):
    monkeypatch.setenv("MINISGL_CPU_THREADS", "3")
    assert course.cpu_threads() == 3
    env = course.tree_env(ROOT)
    assert env["OMP_NUM_THREADS"] == env["MINISGL_CPU_THREADS"] == "3", "every library gets the same count"
    monkeypatch.delenv("MINISGL_CPU_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert 1 <= course.cpu_threads() <= len(os.sched_getaffinity(0))


def test_mine_lists_the_stubs_earlier_chapters_still_lack(workspace):
    stubs = [s.qualname for s in skeleton.stubs_of(workspace)]
    assert [(ch.number, left) for ch, left in course.unfinished_earlier(3)] == [(1, stubs)]
    for rel, src in skeleton.chapter_sources(workspace).items():  # the learner finishes chapter 1
        shutil.copy(src, workspace.skeleton_dir / rel)
    assert course.unfinished_earlier(3) == [], "a finished chapter has nothing left"
