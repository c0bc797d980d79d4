"""A grading worker: nbgrader through its Python API, so that one process does many notebooks.

Starting nbgrader costs about five seconds; grading one notebook, a few more.
A worker process (`python -m autograder.grading.nbgrader_jobs JOBFILE`) therefore
autogrades and writes feedback for a whole list of submissions, reporting one
result per submission, in the job's order, to the parent.

The report travels on a pipe of its own (the descriptor `job["results_fd"]`), never on
stdout or stderr: a kernel's sandbox inherits no descriptor of the worker's
(autograder.grading.sandbox), and a line on this channel is one JSON object of `FIELDS`,
at most `MAX_LINE` bytes, carrying the job's secret `token`, which the parent checks
against the submission it expects next (`parse`); anything else fails that submission alone.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path

import nbformat

from autograder.course import sqlite_url
from autograder.grading.gradebook import merge
from autograder.nbgrader_api import api_for
from autograder.results import notebook_results

MAX_LINE = 16384  # a result line, its log's tail included
LOG_TAIL = 2000  # characters; escaped as JSON, still well under MAX_LINE
FIELDS = {"token": str, "student": str, "assignment": str, "ok": bool, "log": str}


class Malformed(ValueError):
    """A result line that is not what a worker sends."""


def parse(line, token):
    """The result a worker's line carries, or Malformed: a JSON object of exactly FIELDS, with this job's token."""
    if len(line) > MAX_LINE or not line.endswith(b"\n"):
        raise Malformed(f"a result line of more than {MAX_LINE} bytes")
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise Malformed(f"a result line that is not JSON ({type(e).__name__})") from None
    if not isinstance(data, dict) or set(data) != set(FIELDS) or not all(type(data[k]) is t for k, t in FIELDS.items()):
        raise Malformed("a result line without the fields a worker sends")
    if data["token"] != token:
        raise Malformed("a result line that is not this job's")
    return data


def grade_one(job, course_api, student, assignment, db):
    """(ok, log) for one submission: autograde into its own gradebook `db`, merge the result into the
    course's gradebook, and write the feedback from there."""
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
    return ok, log


def grade(job, out):
    """For job['items'] = [[student, assignment, db], ...], in order: grade each and write its result line
    to `out`. An exception while grading one submission fails that submission alone."""
    course_api = api_for(job["root"], root=job["course"], source_directory=job["source"],
                         db_url=sqlite_url(Path(job["course"]) / "gradebook.db"))
    for student, assignment, db in job["items"]:
        try:
            ok, log = grade_one(job, course_api, student, assignment, db)
        except Exception as e:  # noqa: BLE001 (whatever nbgrader or the gradebook raised for this submission)
            ok, log = False, f"{type(e).__name__}: {e}"
            print(f"grading {student}/{assignment} raised {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        line = {"token": job["token"], "student": student, "assignment": assignment, "ok": ok, "log": "" if ok else log[-LOG_TAIL:]}
        out.write(json.dumps(line).encode() + b"\n")
        out.flush()


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
    with open(job["results_fd"], "wb", buffering=0, closefd=True) as results:
        os.set_inheritable(results.fileno(), False)  # nothing the worker starts gets it
        grade(job, results)
