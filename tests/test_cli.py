"""The command line as learners and instructors use it."""
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from autograder import registry
from conftest import ASSIGNMENTS, ROOT


# `check` on two notebooks, a functions one and a training one: nbgrader grades every solution
# to full marks and every released notebook to zero in the same run (tests/grading/test_demo.py)
CHECKED = [n for n in ASSIGNMENTS if n in ("05_self_attention", "08_training_a_transformer")] or ASSIGNMENTS[:1]


def exercises():
    return [ex for name in CHECKED for ex in registry.for_notebook(name)]


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.slow
def test_check_passes_on_the_solutions(tmp_path):
    junit = tmp_path / "report.xml"
    result = cli("check", *[f"solutions/{n}/{n}.ipynb" for n in CHECKED], "--junitxml", str(junit))
    assert result.returncode == 0, result.stdout + result.stderr
    suite = ET.parse(junit).getroot().find("testsuite")
    assert int(suite.get("tests")) == len(exercises())
    assert int(suite.get("failures")) == 0


@pytest.mark.slow
def test_check_fails_on_the_released_notebooks_listing_every_exercise():
    result = cli("check", *[f"notebooks/{n}/{n}.ipynb" for n in CHECKED])
    assert result.returncode != 0
    for ex in exercises():
        assert f"{ex.name} is not implemented yet" in result.stdout


def test_check_on_a_missing_notebook_says_so(tmp_path):
    result = cli("check", str(tmp_path / "nope.ipynb"))
    assert result.returncode == 2
    assert "no such notebook" in result.stderr and "Traceback" not in result.stderr


def test_check_on_a_broken_file_says_so(tmp_path):
    bad = tmp_path / "broken.ipynb"
    bad.write_text("{ not json")
    result = cli("check", str(bad))
    assert result.returncode == 2
    assert "not a readable notebook" in result.stderr and "Traceback" not in result.stderr


def test_grade_without_submissions_folder_says_so(tmp_path):
    result = cli("grade", str(tmp_path))
    assert result.returncode == 2
    assert "no submitted/ folder" in result.stderr


def test_grade_rejects_zero_jobs(tmp_path):
    (tmp_path / "submitted").mkdir()
    result = cli("grade", str(tmp_path), "--jobs", "0")
    assert result.returncode == 2 and "--jobs" in result.stderr


def test_help_lists_the_commands():
    result = cli("--help")
    for command in ("check", "release", "grade", "demo"):
        assert command in result.stdout


# ---------------------------------------------------------------- one mistake is charged once, here as by the grader


@pytest.mark.slow
@pytest.mark.skipif("05_self_attention" not in ASSIGNMENTS, reason="notebook 05 is not among COURSE_ASSIGNMENTS")
def test_check_says_that_the_grader_charges_a_mistake_once(tmp_path, monkeypatch):
    # only scaled_dot_product_attention wrong: the learner's command (the same in the repository and the student
    # distribution, which has no reference to answer in its place) charges SelfAttention too, and says that a grader
    # checks it with the reference's answers and charges the mistake once: the grader's total is SelfAttention's higher
    import importlib
    import inspect
    import re

    import nbformat

    from autograder import record
    from autograder.grading import verdict
    from autograder.release import fill_submission, mistake_source
    from autograder.ship import closed_over
    from conftest import judged_in_process

    name = "05_self_attention"
    sdpa = registry.get("scaled_dot_product_attention")
    wrong = mistake_source(sdpa.name, sdpa.mistakes[0])
    released = nbformat.read(ROOT / "notebooks" / name / f"{name}.ipynb", as_version=4)
    solution = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    path = tmp_path / name / f"{name}.ipynb"
    path.parent.mkdir()
    nbformat.write(fill_submission(released, solution, {sdpa.name: wrong}), path)
    result = cli("check", str(path))
    total = float(re.search(r"^total\s+([\d.]+) / ", result.stdout, re.M).group(1))

    # the grader's verdicts on the same code: the lesson's reference modules, then the wrong exercise
    cases = tmp_path / "cases.pt"
    cases.write_bytes(verdict.cases_for(name))
    monkeypatch.setenv(record.CASES, str(cases))
    monkeypatch.setattr(record, "_exercises", None)
    namespace = {"__name__": "__main__"}
    lessons = [(closed_over(ex.reference) or [ex.reference])[0] for ex in registry.for_notebook(name)]
    for module in sorted({obj.__module__ for obj in lessons}):
        exec(inspect.getsource(importlib.import_module(module)), namespace)
    exec(wrong, namespace)
    reports = judged_in_process(name, namespace)
    assert [n for n, r in reports.items() if r.fraction < 1] == [sdpa.name]
    self_attention = registry.get("SelfAttention")
    assert reports["SelfAttention"].through == (sdpa.name,)
    assert total == pytest.approx(sum(r.score for r in reports.values()) - self_attention.points, abs=0.005), result.stdout  # two decimals
    assert ("It uses your scaled_dot_product_attention, which has not passed its check yet: fix that first (a grader "
            "checks this one with the reference's answers in its place, and charges that mistake once)") in result.stdout
    assert "It is right on its own" in result.stdout or "SelfAttention  " in result.stdout
