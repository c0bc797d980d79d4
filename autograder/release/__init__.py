"""`python -m autograder release`: notebooks/ and the demo submissions, generated from solutions/.

The instructor's side of making the course: this module releases the
notebooks, `student_dist` builds what a class gets, and `colab` writes the
cells that open every notebook on Colab and Binder.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import nbformat

from autograder import registry
from autograder.course import CourseError, assignments
from autograder.mutants import source_of
from autograder.nbgrader_api import generate_assignments

DEMO_STUDENTS = ("ada_complete", "ben_blank", "cy_two_mistakes")


def release(root, dest=None, names=None, examples=True):
    """Generate the student notebooks of `names` (default: all) into `dest` (default: notebooks/)."""
    root = Path(root)
    dest = Path(dest) if dest else root / "notebooks"
    names = names or assignments(root)
    for name in names:
        write_points(root, name)
    with tempfile.TemporaryDirectory() as tmp:
        results = generate_assignments(root, names, dest, Path(tmp) / "gradebook.db")
    for name, (ok, log) in results.items():
        out = dest / name / f"{name}.ipynb"
        if not ok or not out.is_file():
            raise CourseError(f"nbgrader could not release {name}:\n{log[-3000:]}")
        if examples:
            write_examples(root, name, out)
    return dest


def write_points(root, name):
    """Give each check cell of solutions/NAME the points its catalog declares (nbgrader reads them there)."""
    path = Path(root) / "solutions" / name / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and meta.get("grade_id", "").startswith("check_"):
            try:
                points = registry.get(meta["grade_id"].removeprefix("check_")).points
            except KeyError:
                continue
            if meta.get("points") != points:
                meta["points"], changed = points, True
    if changed:
        nbformat.write(nb, path)


def solution_code(source):
    """A solution cell's code as a learner would have typed it: without the markers."""
    lines = source.splitlines()
    return "\n".join(line for line in lines if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def mistake_source(exercise_name, mistake):
    """The catalog's wrong implementation, renamed to the exercise, as cell code."""
    src = source_of(mistake.impl)
    name = mistake.impl.__name__
    src, n = re.subn(rf"^(def|class) {re.escape(name)}\b", rf"\1 {exercise_name}", src, count=1, flags=re.M)
    if n != 1:
        raise ValueError(f"cannot rename {name} to {exercise_name}")
    return src.rstrip()


def fill_submission(released, solution, overrides=None):
    """A copy of the released notebook with its solution cells answered.

    Each solution cell gets the solution's code, or the code in `overrides`
    (grade_id -> source). Cells that are in neither stay as released.
    """
    overrides = overrides or {}
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells if is_solution(c)}
    filled = nbformat.from_dict(released)
    for cell in filled.cells:
        if is_solution(cell):
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            if grade_id in overrides:
                cell.source = overrides[grade_id]
            elif grade_id in answers:
                cell.source = solution_code(answers[grade_id])
    return filled


def is_solution(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("solution", False)


def demo_submissions(root, name, released_path):
    """{student: notebook} for the demo: complete, blank, and two known mistakes."""
    released = nbformat.read(released_path, as_version=4)
    solution = nbformat.read(Path(root) / "solutions" / name / f"{name}.ipynb", as_version=4)
    mistakes = {}
    for exercise_name, mistake_name in registry.demo_mistakes(name):
        ex = registry.get(exercise_name)
        mistake = next(m for m in ex.mistakes if m.name == mistake_name)
        mistakes[exercise_name] = mistake_source(exercise_name, mistake)
    return {
        DEMO_STUDENTS[0]: fill_submission(released, solution),
        DEMO_STUDENTS[1]: nbformat.from_dict(released),
        DEMO_STUDENTS[2]: fill_submission(released, solution, mistakes),
    }


def write_examples(root, name, released_path):
    for student, nb in demo_submissions(root, name, released_path).items():
        out = Path(root) / "examples" / "submitted" / student / name / f"{name}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out)
