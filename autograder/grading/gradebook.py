"""The course's gradebook (COURSE/gradebook.db, nbgrader's own), which `grade` fills.

Grading jobs autograde in parallel, each submission into a gradebook of its own;
`merge` then copies its results into the course's gradebook, one job at a time
(a file lock), keeping what a person entered there: manual scores, extra credit
and comments made in the formgrader survive a later `grade`. nbgrader's own
commands (formgrader, export, generate_feedback, release_feedback, autograde)
all read this gradebook.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import CsvExportPlugin

from autograder.course import sqlite_url


@contextlib.contextmanager
def locked(course):
    """Hold the course gradebook's lock (one writer at a time across grading jobs)."""
    path = Path(course) / ".autograder" / "gradebook.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def merge(src_db, course, assignment, student, reasons=None):
    """Copy one submission's autograded scores and comments from `src_db` into the course's gradebook;
    `reasons` ({exercise: why its check failed}) become the automatic comments on its solution cells."""
    reasons = reasons or {}
    with locked(course), Gradebook(sqlite_url(src_db)) as src, Gradebook(sqlite_url(Path(course) / "gradebook.db")) as dst:
        sub = src.find_submission(assignment, student)
        _student(dst, student)
        dst.update_or_create_submission(assignment, student, timestamp=sub.timestamp, extension=sub.extension)
        for nb in sub.notebooks:
            dst.find_submission_notebook(nb.name, assignment, student).late_submission_penalty = nb.late_submission_penalty
            for g in nb.grades:
                mine = dst.find_grade(g.name, nb.name, assignment, student)
                mine.auto_score = g.auto_score
                mine.needs_manual_grade = g.needs_manual_grade and mine.manual_score is None
            for c in nb.comments:
                dst.find_comment(c.name, nb.name, assignment, student).auto_comment = reasons.get(c.name) or c.auto_comment
        dst.db.commit()


def withdraw(course, assignment, student):
    """No submission of `assignment` for `student` in the course's gradebook (it could not be graded),
    the student being listed all the same, so that nbgrader's export gives them 0."""
    with locked(course), Gradebook(sqlite_url(Path(course) / "gradebook.db")) as gb:
        _student(gb, student)
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:  # no such assignment (a stray folder), or nothing graded yet
            pass


def _student(gb, student):
    try:
        gb.find_student(student)
    except MissingEntry:
        gb.add_student(student)


def states(course):
    """{(student, assignment): a digest of everything a submission's feedback shows from the gradebook}."""
    found = {}
    with Gradebook(sqlite_url(Path(course) / "gradebook.db")) as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                rows = [(nb.name, g.name, g.auto_score, g.manual_score, g.extra_credit) for nb in sub.notebooks for g in nb.grades]
                rows += [(nb.name, c.name, c.auto_comment, c.manual_comment) for nb in sub.notebooks for c in nb.comments]
                digest = hashlib.sha256(json.dumps(sorted(rows, key=str), default=str).encode()).hexdigest()[:16]
                found[(sub.student.id, assignment.name)] = digest
    return found


def export(course, dest):
    """grades.csv in nbgrader's export format, from the course's gradebook (what `nbgrader export` writes)."""
    with Gradebook(sqlite_url(Path(course) / "gradebook.db")) as gb:
        CsvExportPlugin(to=str(dest)).export(gb)
