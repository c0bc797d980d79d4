"""nbgrader through its Python API, so that one process does many notebooks.

Starting nbgrader costs about five seconds; grading one notebook, a few more.
A worker process (`python -m autograder.grading.nbgrader_jobs JOBFILE`) therefore
autogrades and writes feedback for a whole list of submissions, printing one
result line per submission for the parent to read.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from autograder.course import sqlite_url, tool_env

RESULT_PREFIX = "@@autograder-result "


def api_for(config_dir, **course_settings):
    """An NbGraderAPI with the course's nbgrader_config.py and these CourseDirectory settings."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    os.environ.update(tool_env())  # nbgrader runs `alembic` and kernels from PATH
    config = PyFileConfigLoader("nbgrader_config.py", path=str(config_dir)).load_config()
    for key, value in course_settings.items():
        setattr(config.CourseDirectory, key, value)
    coursedir = CourseDirectory(config=config)
    return NbGraderAPI(coursedir=coursedir, config=config)


def generate_assignments(root, names, release_dir, db):
    """`nbgrader generate_assignment` for each name; returns {name: (ok, log)}."""
    api = api_for(root, root=str(root), release_directory=str(release_dir), db_url=sqlite_url(db))
    out = {}
    for name in names:
        result = api.generate_assignment(name, force=True, create=True)
        out[name] = (result["success"], result.get("log", "") + result.get("error", ""))
    return out


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


if __name__ == "__main__":
    grade(json.loads(Path(sys.argv[1]).read_text()))
