"""The instructor demo's example submissions: complete, blank, and two known mistakes."""
import nbformat
import pytest

from autograder import registry
from autograder.core import check_exercise
from autograder.demo import summary
from autograder.grade import Grader, read_grades
from autograder.release import DEMO_STUDENTS
from conftest import ASSIGNMENTS, ROOT, results_of

pytestmark = pytest.mark.slow
COMPLETE, BLANK, MISTAKES = DEMO_STUDENTS


@pytest.fixture(scope="session")
def demo_course(tmp_path_factory):
    import shutil

    course = tmp_path_factory.mktemp("demo")
    shutil.copytree(ROOT / "examples" / "submitted", course / "submitted")
    graded, skipped, failed = Grader(course, root=ROOT, log=lambda *a: None).run(jobs=2, progress=False)
    assert failed == []
    return course


def expected_score(path, name):
    """Grade the submission's own code in this process, with the hidden cases."""
    nb = nbformat.read(path, as_version=4)
    namespace = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("solution") or meta.get("grade_id") == "setup"):
            exec(cell.source, namespace)
    return sum(check_exercise(ex, namespace[ex.name], hidden=True).score for ex in registry.for_notebook(name))


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_demo_grades(demo_course, name):
    grades = {g["student_id"]: g for g in read_grades(demo_course) if g["assignment"] == name}
    full = sum(ex.points for ex in registry.for_notebook(name))
    assert float(grades[COMPLETE]["score"]) == full
    assert float(grades[BLANK]["score"]) == 0
    path = ROOT / "examples" / "submitted" / MISTAKES / name / f"{name}.ipynb"
    assert 0 < float(grades[MISTAKES]["score"]) == pytest.approx(expected_score(path, name)) < full


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_demo_feedback_names_both_mistakes(demo_course, name):
    results = results_of(demo_course, MISTAKES, name)
    demo = registry.demo_mistakes(name)
    assert len(demo) == 2
    for exercise, mistake_name in demo:
        mistake = next(m for m in registry.get(exercise).mistakes if m.name == mistake_name)
        assert mistake.says in results[exercise].reason
        assert mistake.says in summary(demo_course)


def test_regrading_grades_only_what_changed(demo_course):
    grader = Grader(demo_course, root=ROOT, log=lambda *a: None)
    graded, skipped, failed = grader.run(jobs=1, progress=False)
    assert graded == [] and failed == [] and len(skipped) == len(DEMO_STUDENTS) * len(ASSIGNMENTS)
    before = read_grades(demo_course)
    # the blank student completes one notebook: only that one is graded again
    name = ASSIGNMENTS[0]
    src = demo_course / "submitted" / COMPLETE / name / f"{name}.ipynb"
    (demo_course / "submitted" / BLANK / name / f"{name}.ipynb").write_bytes(src.read_bytes())
    graded, skipped, failed = grader.run(jobs=1, progress=False)
    assert graded == [(BLANK, name)] and failed == []
    after = {(g["student_id"], g["assignment"]): g["score"] for g in read_grades(demo_course)}
    assert float(after[(BLANK, name)]) == sum(ex.points for ex in registry.for_notebook(name))
    assert len(after) == len(before)
