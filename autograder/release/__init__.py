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
        write_catalog(root, name)
    with tempfile.TemporaryDirectory() as tmp:
        results = generate_assignments(root, names, dest, Path(tmp) / "gradebook.db")
    for name, (ok, log) in results.items():
        out = dest / name / f"{name}.ipynb"
        if not ok or not out.is_file():
            raise CourseError(f"nbgrader could not release {name}:\n{log[-3000:]}")
        if examples:
            write_examples(root, name, out)
    return dest


def write_catalog(root, name):
    """Write into solutions/NAME what the catalog decides: each check cell's points (nbgrader reads them
    there), the exercises' numbers in their headings and the introduction's table of exercises."""
    path = Path(root) / "solutions" / name / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    changed = lay_out(nb, [ex.name for ex in registry.for_notebook(name)], where=f"solutions/{name}")
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


# An exercise's heading, the introduction's table of exercises, and a tier of hints (autograder.new_exercise writes them)
HEADING = re.compile(r"^### Exercise (\d+) · `(\w+)` \(difficulty ([●○ ]+?), about (\d+) minutes\)", re.M)
TABLE = re.compile(r"^\| # \| exercise \| difficulty \| time \|(?:\n\|[^\n]*\|)*", re.M)
HINT = re.compile(r"<details><summary>Hint (\d) · [^<]+</summary>\n\n(.+?)\n\n</details>", re.S)


def lay_out(nb, names, where="the notebook"):
    """Number the headings of the exercises `names` (a notebook's, from the registry) in the order of their
    solution cells, and write the introduction's table of exercises from the headings. Returns whether `nb` changed."""
    order = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if is_solution(c) and c.metadata["nbgrader"]["grade_id"] in names]
    number = {n: k for k, n in enumerate(order, 1)}
    found, changed = {}, False

    def renumbered(m):
        if m[2] not in number:
            return m[0]
        found[m[2]] = m
        return f"### Exercise {number[m[2]]} · `{m[2]}` (difficulty {m[3]}, about {m[4]} minutes)"

    for cell in nb.cells:
        if cell.cell_type == "markdown" and HEADING.search(cell.source):
            source = HEADING.sub(renumbered, cell.source)
            changed, cell.source = changed or source != cell.source, source
    lacking = [n for n in names if n not in found]
    if lacking:
        raise CourseError(f"{where}: no solution cell or no heading `### Exercise k · `name` (difficulty ● ○ ○, about "
                          f"10 minutes)` for {', '.join(lacking)}")
    table = "| # | exercise | difficulty | time |\n|---|---|---|---|" + "".join(
        f"\n| {number[n]} | `{n}` | {found[n][3]} | {found[n][4]} min |" for n in order)
    intro = next((c for c in nb.cells if c.cell_type == "markdown" and TABLE.search(c.source)), None)
    if intro is None:
        raise CourseError(f"{where}: its introduction has no table of exercises; add the line "
                          "`| # | exercise | difficulty | time |` where it goes, and the release fills it in")
    source = TABLE.sub(lambda m: table, intro.source, count=1)
    changed, intro.source = changed or source != intro.source, source
    return changed


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
