"""nbgrader through its Python API, so that one process does many notebooks.

Starting nbgrader costs about five seconds; grading one notebook, a few more.
A worker process (`python -m autograder.nbgrader_jobs JOBFILE`) therefore
autogrades and writes feedback for a whole list of submissions, printing one
result line per submission for the parent to read.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from autograder.course import sqlite_url, tool_env
from autograder.clean_room import enforce, withhold_all
from autograder.integrity import Snapshot
from autograder.kernel_setup import sweep

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
    """Autograde and write feedback for job['items'] = [[student, assignment, db], ...]."""
    apis = {}
    for student, assignment, db in job["items"]:
        if db not in apis:
            apis[db] = api_for(
                job["root"],
                root=job["course"],
                source_directory=job["source"],
                db_url=sqlite_url(db),
            )
        api = apis[db]
        snapshot = Snapshot(job["root"])  # the course's files before this submission's code runs
        auto = api.autograde(assignment, student, force=True, create=True)
        ok, log = auto["success"], auto.get("log", "") + auto.get("error", "")
        sweep()
        note = ""
        changed = snapshot.restore()
        if ok and not changed:
            # the authoritative comparison, outside the process that ran the student's code
            _, note = enforce(job["course"], student, assignment, sqlite_url(db))
            changed = snapshot.restore()  # the clean room ran the learner's code too
        if ok and changed:
            note = withhold_all(job["course"], student, assignment, sqlite_url(db), changed, job["root"])
        if ok:
            feedback = api.generate_feedback(assignment, student, force=True)
            ok = feedback["success"]
            if not ok:
                log += feedback.get("log", "") + feedback.get("error", "")
        sweep()  # processes a submission left behind (a fork bomb, say) die with its grading
        line = json.dumps({"student": student, "assignment": assignment, "ok": ok, "note": note,
                           "score": total_score(sqlite_url(db), student, assignment) if ok else None,
                           "log": "" if ok else log[-6000:]})
        print(RESULT_PREFIX + line, flush=True)


def total_score(db_url, student, assignment):
    """The submission's score in its gradebook, as this worker left it (grade.py keeps it, so
    that a gradebook changed later, by a process a submission left behind, say, is noticed)."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        return gb.find_submission(assignment, student).score


if __name__ == "__main__":
    grade(json.loads(Path(sys.argv[1]).read_text()))
