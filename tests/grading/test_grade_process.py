"""`grade`'s own processes: stopping it (Ctrl-C, SIGTERM, kill -9) stops every worker and sandbox,
and a worker that does not finish a submission in time is stopped and the class graded without it."""
import json
import os
import signal
import subprocess
import sys
import time

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from autograder import registry
from autograder.grading.grade import Grader, read_grades, read_problems, split
from autograder.release import fill_submission
from conftest import ROOT

pytestmark = pytest.mark.slow
NAME = "05_self_attention"
FULL = sum(ex.points for ex in registry.for_notebook(NAME))


def submission(course, student, hang=False):
    rel = nbformat.read(ROOT / "notebooks" / NAME / f"{NAME}.ipynb", as_version=4)
    sol = nbformat.read(ROOT / "solutions" / NAME / f"{NAME}.ipynb", as_version=4)
    nb = fill_submission(rel, sol)
    if hang:
        nb.cells.insert(1, new_code_cell("import time\ntime.sleep(3600)"))
    path = course / "submitted" / student / NAME / f"{NAME}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)


def descendants(pid):
    """{pid: command line} of every process below `pid` (bwrap's sandboxes included: they keep their host parents)."""
    children, found, todo = {}, {}, [pid]
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(p))
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = command_line(child)
            todo.append(child)
    return found


def command_line(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return None


def alive(processes):
    """The processes still running (a pid now used by another command is not one of them)."""
    return {pid: cmd for pid, cmd in processes.items() if command_line(pid) == cmd and cmd
            and not open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"}


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["ctrl-c", "sigterm", "kill-9"])
def test_stopping_grade_stops_every_process_it_started(tmp_path, how):
    for student in ("ada", "ben"):
        submission(tmp_path, student, hang=True)
    proc = subprocess.Popen([sys.executable, "-m", "autograder", "grade", str(tmp_path), "--jobs", "2", "--no-progress"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline, started = time.time() + 300, {}
        while time.time() < deadline:  # until both sandboxes run their kernels
            started = descendants(proc.pid)
            if sum(b"bwrap" in cmd for cmd in started.values() if cmd) >= 2 and sum(b"ipykernel" in cmd for cmd in started.values() if cmd) >= 2:
                break
            time.sleep(0.5)
        assert sum(b"ipykernel" in (cmd or b"") for cmd in started.values()) >= 2, started
        time.sleep(2)
        started = descendants(proc.pid)
        os.kill(proc.pid, how)  # grade alone, as a terminal's Ctrl-C reaches it: its workers have sessions of their own
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # say where grade is stuck: SIGUSR1 makes it print every thread's stack
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(2)
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"grade did not stop within 120 s of {how.name}; its threads then:\n{proc.communicate()[0][-6000:]}\n"
                        f"its processes: {alive(started)}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if how != signal.SIGKILL:
        assert proc.returncode == 130 and "every grading process has ended" in out, out
    deadline = time.time() + 30  # kill -9: the workers die with grade (PR_SET_PDEATHSIG), their sandboxes with them
    while alive(started) and time.time() < deadline:
        time.sleep(0.5)
    assert alive(started) == {}


def test_a_submission_past_its_deadline_is_stopped_and_the_class_graded(tmp_path, monkeypatch):
    # a notebook budget longer than grade's deadline for one submission, so that only the deadline stops it
    monkeypatch.setenv("AUTOGRADER_NOTEBOOK_SECONDS", "3600")
    monkeypatch.setenv("AUTOGRADER_CELL_TIMEOUT", "3600")
    submission(tmp_path, "aa_hangs", hang=True)
    submission(tmp_path, "bb_honest")
    submission(tmp_path, "cc_honest")

    class Impatient(Grader):
        def deadline(self):
            return 45

    grader = Impatient(tmp_path, root=ROOT, log=lambda *a: None)
    # two workers: bb_honest is graded while aa_hangs waits out the deadline, and cc_honest, the rest of
    # aa_hangs' share, goes to the worker started in its place
    graded, skipped, failed = grader.run(jobs=2, progress=False)
    assert failed == [("aa_hangs", NAME)] and sorted(graded) == [("bb_honest", NAME), ("cc_honest", NAME)]
    scores = {g["student_id"]: float(g["score"]) for g in read_grades(tmp_path)}
    assert scores == {"aa_hangs": 0, "bb_honest": FULL, "cc_honest": FULL}
    assert [p["reason"] for p in read_problems(tmp_path)] == ["grading did not finish within 45 s; not graded (0 points)"]
    assert "did not finish within 45 s" in (tmp_path / "feedback" / "aa_hangs" / NAME / f"{NAME}.html").read_text()


# a worker that speaks out of turn before grading the last submission for real: a line far too long, a line
# without the job's token, a line for another student's submission (claiming it graded); each fails only the
# submission its worker was on, and the submission the lie was about is graded on its own
LYING_WORKER = r"""
import json, os, sys
job = json.load(open(sys.argv[1]))
out = os.fdopen(job["results_fd"], "wb", buffering=0, closefd=False)
(a, name, _), (b, _, _), (c, _, _), (d, _, _) = job["items"]
def line(student, token=job["token"], ok=True):
    return json.dumps({"token": token, "student": student, "assignment": name, "ok": ok, "log": ""}).encode() + b"\n"
out.write(b"{" + b"x" * (8 * 2**20) + b"\n")
out.write(line(b, token="not-the-job's"))
out.write(line(d))
job["items"] = job["items"][3:]
with open(sys.argv[1], "w") as fh:
    json.dump(job, fh)
os.execv(sys.executable, [sys.executable, "-m", "autograder.grading.nbgrader_jobs", sys.argv[1]])
"""


def test_a_malformed_result_line_fails_its_own_submission_alone(tmp_path):
    for student in ("aa_long_line", "bb_wrong_token", "cc_speaks_for_dd", "dd_honest"):
        submission(tmp_path, student)

    class Lying(Grader):
        def worker_command(self, jobfile):
            return [sys.executable, "-c", LYING_WORKER, str(jobfile)]

    graded, skipped, failed = Lying(tmp_path, root=ROOT, log=lambda *a: None).run(jobs=1, progress=False)
    assert sorted(failed) == [("aa_long_line", NAME), ("bb_wrong_token", NAME), ("cc_speaks_for_dd", NAME)]
    assert graded == [("dd_honest", NAME)]
    scores = {g["student_id"]: float(g["score"]) for g in read_grades(tmp_path)}
    assert scores == {"aa_long_line": 0, "bb_wrong_token": 0, "cc_speaks_for_dd": 0, "dd_honest": FULL}
    reasons = {p["student_id"]: p["reason"] for p in read_problems(tmp_path)}
    assert "a result line of more than" in reasons["aa_long_line"]
    assert "not this job's" in reasons["bb_wrong_token"]
    assert "a result for another submission" in reasons["cc_speaks_for_dd"]


def test_a_result_line_is_what_a_worker_sends_or_nothing():
    from autograder.grading.nbgrader_jobs import MAX_LINE, Malformed, parse

    good = {"token": "t", "student": "ada", "assignment": NAME, "ok": True, "log": ""}
    assert parse(json.dumps(good).encode() + b"\n", "t") == good
    for bad in [json.dumps(good).encode(), b"x" * (MAX_LINE + 1) + b"\n", b"{not json\n", b"[" * 10000 + b"\n",
                json.dumps({**good, "extra": 1}).encode() + b"\n", json.dumps({**good, "ok": "yes"}).encode() + b"\n",
                json.dumps({k: v for k, v in good.items() if k != "student"}).encode() + b"\n"]:
        with pytest.raises(Malformed):
            parse(bad, "t")
    with pytest.raises(Malformed):
        parse(json.dumps(good).encode() + b"\n", "another job's")


def test_each_worker_gets_its_share_of_every_notebook():
    # ten notebooks a student and two workers: dealt student by student, one worker would get every student's 02, 04,
    # ..., 10 (08 and 10 the longest to grade), the other every 01, 03, ..., 09
    notebooks = [f"{n:02d}_notebook" for n in range(1, 11)]
    todo = [(student, name) for student in ("ada", "ben", "cy", "dee") for name in notebooks]
    for jobs in (1, 2, 3, 4):
        shares = split(todo, jobs)
        assert sorted(key for share in shares for key in share) == sorted(todo)
        for name in notebooks:
            counts = [sum(key[1] == name for key in share) for share in shares]
            assert max(counts) - min(counts) <= 1, (jobs, name, counts)
    assert split(todo[:1], 4) == [todo[:1]]
