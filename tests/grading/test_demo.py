"""The instructor demo's example submissions (complete, blank, two known mistakes),
graded in the shared course of conftest.graded_course, and re-grading."""
import shutil

import nbformat
import pytest

from autograder import registry
from autograder import record
from autograder.grading import verdict
from autograder.grading.demo import summary
from autograder.grading.grade import Grader, read_grades
from conftest import ASSIGNMENTS, BLANK, COMPLETE, ROOT, TWO_MISTAKES, judged_in_process, results_of

pytestmark = pytest.mark.slow


def expected_score(path, name, monkeypatch, tmp_path):
    """Grade the submission's own code in this process, as the sandbox runs it (every cell but the
    checks, under the grading budget) and as the grader judges it (hidden cases included)."""
    import contextlib
    import io
    import warnings

    import matplotlib.pyplot as plt

    cases = tmp_path / "cases.pt"
    cases.write_bytes(verdict.cases_for(name))
    monkeypatch.setenv(record.CASES, str(cases))
    monkeypatch.setenv("AUTOGRADER_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setattr(record, "_exercises", None)
    namespace = {"__name__": "__main__"}
    for cell in nbformat.read(path, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and not (meta.get("grade") and not meta.get("solution")) and "google.colab" not in cell.source:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the notebook's own figures and warnings are not what this test reads
                try:
                    exec(cell.source, namespace)
                except Exception:  # a failing cell fails in the notebook too; the rest still runs
                    pass
    plt.close("all")
    return sum(r.score for r in judged_in_process(name, namespace).values())


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_demo_grades(graded_course, name, monkeypatch, tmp_path):
    grades = {g["student_id"]: g for g in graded_course["grades"] if g["assignment"] == name}
    full = sum(ex.points for ex in registry.for_notebook(name))
    assert float(grades[COMPLETE]["score"]) == full
    assert float(grades[BLANK]["score"]) == 0
    path = graded_course["course"] / "submitted" / TWO_MISTAKES / name / f"{name}.ipynb"
    score = float(grades[TWO_MISTAKES]["score"])
    assert 0 < score < full
    assert score == pytest.approx(expected_score(path, name, monkeypatch, tmp_path))


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_demo_feedback_names_both_mistakes(graded_course, name):
    results = results_of(graded_course["course"], TWO_MISTAKES, name)
    demo = registry.demo_mistakes(name)
    assert len(demo) == 2
    text = summary(graded_course["course"])
    for exercise, mistake_name in demo:
        mistake = next(m for m in registry.get(exercise).mistakes if m.name == mistake_name)
        assert mistake.says in results[exercise].reason
        assert mistake.says in text


def test_regrading_grades_only_what_changed(graded_course, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(graded_course["course"], course)
    grader = Grader(course, root=ROOT, log=lambda *a: None)
    graded, skipped, failed = grader.run(jobs=1, progress=False)
    assert graded == [] and failed == [] and len(skipped) == len(graded_course["graded"])
    before = read_grades(course)
    # the blank student completes one notebook: only that one is graded again
    name = ASSIGNMENTS[0]
    src = course / "submitted" / COMPLETE / name / f"{name}.ipynb"
    (course / "submitted" / BLANK / name / f"{name}.ipynb").write_bytes(src.read_bytes())
    graded, skipped, failed = grader.run(jobs=1, progress=False)
    assert graded == [(BLANK, name)] and failed == []
    after = {(g["student_id"], g["assignment"]): g["score"] for g in read_grades(course)}
    assert float(after[(BLANK, name)]) == sum(ex.points for ex in registry.for_notebook(name))
    assert len(after) == len(before)
