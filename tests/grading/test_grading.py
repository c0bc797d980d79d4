"""Grading through real nbgrader: full marks, zero, and every catalogued mistake named."""
import html
import re

import pytest

from autograder import registry
from autograder.release import mistake_source
from conftest import ASSIGNMENTS, BLANK, COMPLETE, results_of

pytestmark = pytest.mark.slow


def total_points(name):
    return sum(ex.points for ex in registry.for_notebook(name))


def grade_row(graded_course, student, name):
    return next(g for g in graded_course["grades"] if g["student_id"] == student and g["assignment"] == name)


def test_no_grading_errors(graded_course):
    assert graded_course["failed"] == []


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solution_gets_full_marks(graded_course, name):
    row = grade_row(graded_course, COMPLETE, name)
    assert float(row["max_score"]) == total_points(name)
    assert float(row["score"]) == float(row["max_score"])


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_released_notebook_gets_zero(graded_course, name):
    assert float(grade_row(graded_course, BLANK, name)["score"]) == 0.0
    results = results_of(graded_course["course"], BLANK, name)
    assert {r.status for r in results.values()} == {"not implemented"}


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_mistakes_pasted_in_a_notebook_are_caught_and_named_by_nbgrader(graded_course, name):
    planned = {(ex, m.name) for (s, a), ms in graded_course["plan"].items() if a == name for ex, m in ms.items()}
    assert planned == {(ex.name, ex.mistakes[0].name) for ex in registry.for_notebook(name) if ex.mistakes}
    for (student, assignment), mistakes in graded_course["plan"].items():
        if assignment != name:
            continue
        results = results_of(graded_course["course"], student, name)
        for exercise, mistake in mistakes.items():
            r = results[exercise]
            assert r.score < r.points, f"{student}: {exercise}/{mistake.name} got full marks"
            assert mistake.says in r.reason, f"{student}: {exercise}/{mistake.name}: {r.reason}"
        # exercises that use a mistaken one (depends_on) may fail too; the others must pass
        untouched = [ex for ex in results if not depends_on_any(ex, mistakes)]
        for exercise in untouched:
            assert results[exercise].status == "passed", (student, exercise, results[exercise].reason)


def depends_on_any(exercise, names):
    if exercise in names:
        return True
    return any(depends_on_any(d, names) for d in registry.get(exercise).depends_on)


def html_text(path):
    text = re.sub(r"<[^>]+>", "", path.read_text())
    return " ".join(html.unescape(text).split())


def test_feedback_html_names_the_mistakes(graded_course):
    course = graded_course["course"]
    for (student, name), mistakes in graded_course["plan"].items():
        text = html_text(course / "feedback" / student / name / f"{name}.html")
        for mistake in mistakes.values():
            assert " ".join(mistake.says.split()) in text, (student, mistake.name)


def test_hidden_cases_ran_under_autograde_but_are_not_described(graded_course):
    course = graded_course["course"]
    import nbformat

    name = ASSIGNMENTS[0]
    nb = nbformat.read(course / "autograded" / COMPLETE / name / f"{name}.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    counts = {ex.name: sum(1 for c in ex.cases()) for ex in registry.for_notebook(name)}
    for ex, n in counts.items():
        assert f"{ex}: " in text and f"{n} cases" in text, f"{ex} did not run all {n} cases under autograde"


def test_feedback_shows_only_what_the_students_code_did(graded_course):
    # Diagnosing runs the catalog's mistakes on the grader's side; their warnings (k.T on a batched
    # tensor warns, say) never reach a student whose own code did not do that.
    course = graded_course["course"]
    for (student, name), mistakes in graded_course["plan"].items():
        if any(".T" in mistake_source(ex, m) for ex, m in mistakes.items()):
            continue
        text = html_text(course / "feedback" / student / name / f"{name}.html")
        assert "The use of `x.T`" not in text and "UserWarning" not in text, (student, name)
