"""`python -m autograder demo`: the instructor pipeline on the example submissions.

Copies examples/submitted/ (a complete, a blank and a two-mistake submission
of each notebook) into a temporary course folder, grades it with real nbgrader
and prints the grade table and each student's feedback.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat

from autograder.course import CourseError, find_root
from autograder.grading.grade import Grader, read_grades, read_problems
from autograder.results import notebook_results, table


def summary(course):
    """The grade table of a graded course folder, then every student's per-exercise feedback."""
    course = Path(course)
    grades = read_grades(course)
    lines = [f"{'student':<18} {'assignment':<30} {'score':>12}"]
    for g in grades:
        lines.append(f"{g['student_id']:<18} {g['assignment']:<30} {float(g['score']):>5g} / {float(g['max_score']):<5g}")
    problems = read_problems(course)
    if problems:
        lines += ["", "for the instructor (grading_problems.csv):"] + [f"  {p['student_id']}/{p['assignment']}: {p['reason']}" for p in problems]
    for g in grades:
        autograded = course / "autograded" / g["student_id"] / g["assignment"]
        for path in sorted(autograded.glob("*.ipynb")):
            rows = notebook_results(nbformat.read(path, as_version=4))
            lines.append("")
            lines.append(table(rows, title=f"{g['student_id']} · {path.stem}"))
    return "\n".join(lines)


def demo(jobs=2, keep=None, echo=print):
    root = find_root()
    examples = root / "examples" / "submitted"
    if not examples.is_dir():
        raise CourseError(f"{examples} is missing; run `python -m autograder release` first")
    tmp = None
    if keep:
        course = Path(keep).resolve()
        course.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="course-demo-")
        course = Path(tmp.name)
    try:
        shutil.copytree(examples, course / "submitted", dirs_exist_ok=True)
        echo(f"grading the example submissions in {course} with nbgrader ({jobs} at a time)…")
        graded, skipped, failed = Grader(course, root=root, log=echo).run(jobs=jobs)
        echo(summary(course))
        echo(f"\nfeedback: {course / 'feedback'}   grades: {course / 'grades.csv'}" + ("" if keep else " (temporary; use --keep DIR to keep them)"))
        return 1 if failed else 0
    finally:
        if tmp:
            tmp.cleanup()
