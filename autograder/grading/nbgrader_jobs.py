"""A grading worker: nbgrader through its Python API, so that one process does many notebooks.

Starting nbgrader costs about five seconds; grading one notebook, a few more.
A worker process (`python -m autograder.grading.nbgrader_jobs JOBFILE`) therefore
autogrades and writes feedback for a whole list of submissions, printing one
result line per submission for the parent to read.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path

from autograder.course import sqlite_url
from autograder.nbgrader_api import api_for

RESULT_PREFIX = "@@autograder-result "


def grade(job):
    """For job['items'] = [[student, assignment, db], ...]: autograde into the submission's own gradebook
    `db`, merge the result into the course's gradebook, and write the feedback from there."""
    import nbformat

    from autograder.grading.gradebook import merge
    from autograder.results import notebook_results

    course_api = api_for(job["root"], root=job["course"], source_directory=job["source"],
                         db_url=sqlite_url(Path(job["course"]) / "gradebook.db"))
    for student, assignment, db in job["items"]:
        api = api_for(job["root"], root=job["course"], source_directory=job["source"], db_url=sqlite_url(db))
        auto = api.autograde(assignment, student, force=True, create=True)
        ok, log = auto["success"], auto.get("log", "") + auto.get("error", "")
        if ok:
            autograded = Path(job["course"]) / "autograded" / student / assignment / f"{assignment}.ipynb"
            rows = notebook_results(nbformat.read(autograded, as_version=4)) if autograded.exists() else []
            merge(db, job["course"], assignment, student, {r.exercise: r.reason for r in rows if r.reason})
            Path(db).unlink()
            feedback = course_api.generate_feedback(assignment, student, force=True)
            ok = feedback["success"]
            if not ok:
                log += feedback.get("log", "") + feedback.get("error", "")
        line = json.dumps({"student": student, "assignment": assignment, "ok": ok, "log": "" if ok else log[-6000:]})
        print(RESULT_PREFIX + line, flush=True)


def die_with(parent):
    """End this worker when `grade` (process `parent`) ends, however it ends (kill -9 included): its
    kernels' sandboxes end with it."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if parent and os.getppid() != parent:  # it ended before this line
        os._exit(1)


if __name__ == "__main__":
    job = json.loads(Path(sys.argv[1]).read_text())
    die_with(job.get("parent"))
    grade(job)
