"""The world learner code runs in while it is graded (autograder.grading.sandbox, autograder.grading.views)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder import registry
from autograder.grading import nbgrader_jobs, limits, sandbox, verdict, views
from autograder import ship
from autograder.course import CACHE, CourseError, drop_older
from autograder.grading.grade import Grader, read_problems
from conftest import ROOT

NAME = "05_self_attention"
needs_bwrap = pytest.mark.skipif(sandbox.problem() != "", reason=f"no sandbox here: {sandbox.problem()}")

PROBE = """
import json, os, socket, sys
found = {}
def attempt(name, f):
    try:
        found[name] = repr(f())
    except Exception as e:
        found[name] = "blocked: " + type(e).__name__
attempt("reference", lambda: __import__("solutions_lib"))
attempt("catalog", lambda: __import__("autograder.assignments"))
attempt("repository", lambda: os.listdir(sys.argv[1]))
attempt("course", lambda: os.listdir(sys.argv[2]))
attempt("write the environment", lambda: open(os.path.join(sys.prefix, "planted.pth"), "w"))
attempt("write the root", lambda: open("/planted", "w"))
attempt("write its folder", lambda: open("mine.txt", "w").write("ok"))
attempt("write /tmp", lambda: open("/tmp/mine.txt", "w").write("ok"))
attempt("network", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=3))
attempt("processes", lambda: sorted(p for p in os.listdir("/proc") if p.isdigit()))
attempt("uid", lambda: os.getuid())
attempt("own stand-in", lambda: __import__("course_lib.attention", fromlist=["x"]).causal_mask)
attempt("environment", lambda: sorted(os.environ))
attempt("read the cases", lambda: len(open("/grading/cases.pt", "rb").read()) > 0)
attempt("write /grading", lambda: open("/grading/planted", "w"))
attempt("write /submission", lambda: open("/submission/planted", "w"))
attempt("fill the scratch", lambda: open("/tmp/big", "wb").write(b"x" * (int(sys.argv[4]) + 1)))
attempt("working folder", lambda: os.getcwd())
print(json.dumps(found))
"""


@needs_bwrap
def test_the_sandbox_holds_only_what_a_student_has(tmp_path):
    course = tmp_path / "course"
    folder = course / "submitted" / "eve" / NAME
    folder.mkdir(parents=True)
    (folder / f"{NAME}.ipynb").write_text("{}")
    (course / "gradebook.db").write_text("grades")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    lim = limits.load(ROOT)
    box = sandbox.Sandbox(views.view(ROOT, NAME), folder, verdict.cases_for(NAME), lim, hide=[ROOT, course])
    try:
        argv = box.command([sys.executable, "-c", PROBE, str(ROOT), str(course), str(listener.getsockname()[1]), str(lim.scratch_mb * 2**20)])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        box.close()
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for name in ("reference", "catalog", "course", "write the environment", "write the root", "network", "own stand-in",
                 "write /grading", "write /submission", "fill the scratch"):
        assert found[name].startswith("blocked"), (name, found[name])
    assert found["read the cases"] == "True" and found["working folder"] == repr("/tmp/work")
    # of the repository, at most the Python environment inside it (.venv) is there
    assert found["repository"].startswith("blocked") or found["repository"] == repr([Path(sys.prefix).name])
    assert found["write its folder"] == "2" and found["write /tmp"] == "2"
    assert not list(box.grading.parent.glob(box.grading.name))  # nothing of it is left on the host
    assert found["processes"] == "['1', '2']" and found["uid"] == str(sandbox.UID)
    assert "AUTOGRADER_CASES" in found["environment"] and "HOME" in found["environment"]
    with pytest.raises(socket.timeout):
        listener.accept()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"),
                    reason="needs root, useradd and setpriv: a classmate is a Unix account of their own")
def test_a_classmate_on_the_grading_machine_reaches_neither_the_hidden_cases_nor_the_graders_socket(tmp_path):
    """While a submission is graded, the host's side of its /grading holds the hidden cases and the socket that
    serves the reference's answers: another account on the machine (a student's shell on a JupyterHub node) can
    neither read the one nor connect to the other."""
    from test_exchange import as_user, unix_users

    folder = tmp_path / "submitted" / "eve" / NAME
    folder.mkdir(parents=True)
    box = sandbox.Sandbox(None, folder, verdict.cases_for(NAME), limits.load(ROOT), sandboxed=False)
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(box.oracle_socket))
        server.listen()
        with unix_users("mallory") as accounts:
            read = as_user(accounts["mallory"], ["/usr/bin/python3", "-c", "import sys; open(sys.argv[1], 'rb').read(1)",
                                                 box.grading / "cases.pt"], cwd="/")
            connect = as_user(accounts["mallory"], ["/usr/bin/python3", "-c", "import socket, sys; "
                              "socket.socket(socket.AF_UNIX).connect(sys.argv[1])", box.oracle_socket], cwd="/")
        assert read.returncode != 0 and "PermissionError" in read.stderr, read.stderr
        assert connect.returncode != 0 and "PermissionError" in connect.stderr, connect.stderr
        assert (box.grading.stat().st_mode & 0o777) == 0o700 and box.grading.stat().st_uid == os.geteuid()
    finally:
        server.close()
        box.close()


def test_a_killed_graders_grading_folder_goes_with_the_next_sandbox(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    stale, alive, other = (tmp_path / f"{sandbox.PREFIX}{dead}-x", tmp_path / f"{sandbox.PREFIX}{os.getppid()}-y", tmp_path / "autograder-sandbox-old")
    for folder in (stale, alive, other):
        folder.mkdir()
        (folder / "cases.pt").write_bytes(b"hidden")
    folder = tmp_path / "submitted" / "eve" / NAME
    folder.mkdir(parents=True)
    box = sandbox.Sandbox(None, folder, verdict.cases_for(NAME), limits.load(ROOT), sandboxed=False)
    box.close()
    assert not stale.exists() and alive.exists() and other.exists()  # a live grader's, and what it cannot tell, stay
    assert not box.grading.exists()


def test_a_notebooks_view_has_the_student_side_and_none_of_its_exercises():
    folder = views.view(ROOT, NAME)
    own = {ex.name for ex in registry.for_notebook(NAME)}
    assert not (folder / "solutions_lib").exists() and not (folder / "autograder" / "assignments").exists()
    blocks = "".join(p.read_text() for p in (folder / "course_lib").glob("*.py"))
    assert not [n for n in own if f"def {n}(" in blocks or f"class {n}(" in blocks]
    assert "class MultiHeadAttention(" in blocks  # another notebook's building block stays
    assert sorted(p.name for p in (folder / "course_lib").glob("*.py")) == sorted(p.name for p in (ROOT / "course_lib").glob("*.py"))
    assert sorted(p.name for p in (folder / "autograder" / "data").iterdir()) == [f"{NAME}.pt"]
    assert ship.leaks(folder) == []
    assert views.view(ROOT, NAME) == folder  # built once


def test_courses_share_views_only_through_a_cache_that_is_the_grader_s_alone(tmp_path, monkeypatch):
    """$AUTOGRADER_CACHE (what `make test` sets, so that every course graded from the same code shares one view per
    notebook): used when it is this user's alone, refused, before anything is built there, when others may write it."""
    shared = tmp_path / "cache"
    monkeypatch.setenv(CACHE, str(shared))
    folder = views.view(ROOT, NAME)
    assert folder.parent == shared / "views" and oct(shared.stat().st_mode & 0o777) == "0o700"
    open_to_all = tmp_path / "open"
    open_to_all.mkdir(mode=0o777)
    open_to_all.chmod(0o777)
    monkeypatch.setenv(CACHE, str(open_to_all))
    with pytest.raises(CourseError, match="AUTOGRADER_CACHE=.* is not this user's alone"):
        views.view(ROOT, NAME)
    assert list(open_to_all.iterdir()) == []


def test_a_course_s_own_cache_keeps_one_version_and_a_shared_one_every_version(tmp_path, monkeypatch):
    """Another version of a view or of a notebook's data is removed from a course's own .autograder when a new one
    is built there, and kept in a shared cache, where a copy of that other code may be grading with it."""
    def versions(folder):
        (folder / "views" / "05-old").mkdir(parents=True)
        (folder / "views" / "05-new").mkdir()
        (folder / "views" / "06-old").mkdir()
        (folder / "data").mkdir()
        for name in ("05-old.pt", "05-new.pt", "06-old.pt"):
            (folder / "data" / name).write_bytes(b"")
        drop_older(folder / "views" / "05-new", "05-*")
        drop_older(folder / "data" / "05-new.pt", "05-*.pt")
        return sorted(str(p.relative_to(folder)) for p in folder.glob("*/*"))

    monkeypatch.delenv(CACHE, raising=False)
    assert versions(tmp_path / "own") == ["data/05-new.pt", "data/06-old.pt", "views/05-new", "views/06-old"]
    monkeypatch.setenv(CACHE, str(tmp_path / "shared"))
    assert len(versions(tmp_path / "shared")) == 6


def test_grading_stops_before_anything_where_the_sandbox_cannot_start(tmp_path, monkeypatch):
    folder = tmp_path / "submitted" / "eve" / NAME
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / NAME / f"{NAME}.ipynb", folder)
    monkeypatch.setattr(sandbox, "_problem", "bubblewrap is not installed: apt-get install bubblewrap")
    with pytest.raises(CourseError, match="bubblewrap is not installed"):
        Grader(tmp_path, root=ROOT, log=lambda *a: None).run(progress=False)
    assert not (tmp_path / "autograded").exists() and not (tmp_path / "grades.csv").exists()


def test_plain_nbgrader_stops_too_without_bubblewrap(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text(f"c = get_config()\nload_subconfig({str(ROOT / 'nbgrader_config.py')!r})\n")
    env = os.environ | {"PATH": str(Path(sys.executable).parent)}  # no bwrap on this PATH
    done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", NAME], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "cannot autograde: bubblewrap is not installed" in done.stdout + done.stderr


@pytest.mark.slow
def test_no_sandbox_grades_and_says_so_on_every_row(tmp_path):
    for student in ("ada", "ben"):
        folder = tmp_path / "submitted" / student / NAME
        folder.mkdir(parents=True)
        shutil.copy(ROOT / "examples" / "submitted" / "ada_complete" / NAME / f"{NAME}.ipynb", folder)
    graded, _, failed = Grader(tmp_path, root=ROOT, log=lambda *a: None, sandboxed=False).run(progress=False)
    assert sorted(graded) == [("ada", NAME), ("ben", NAME)] and failed == []
    assert [(p["student_id"], p["reason"]) for p in read_problems(tmp_path)] == [("ada", sandbox.UNSAFE_NOTE), ("ben", sandbox.UNSAFE_NOTE)]
    nb = nbformat.read(tmp_path / "autograded" / "ada" / NAME / f"{NAME}.ipynb", as_version=4)
    assert "recorded" not in json.dumps(nb)  # graded through the same comparison as in the sandbox


def test_the_grading_page_states_the_limits_nbgrader_config_sets():
    from autograder.nbgrader_api import load_config

    lim = limits.load(ROOT)
    text = (ROOT / "docs" / "GRADING.md").read_text()
    for said in [f"at most {lim.submission_file_mb} MB a file, {lim.submission_folder_mb} MB and {lim.submission_entries} entries",
                 f"tmpfs of {lim.scratch_mb} MB", f"{lim.memory_mb // 1024} GiB of address space and {lim.cpu_seconds} s of CPU",
                 f"{lim.processes} processes", f"{lim.notebook_seconds} s of wall clock for the whole notebook",
                 f"{lim.sandbox_memory_mb} MB for the whole sandbox", f"at most J × {lim.sandbox_memory_mb} MB",
                 f"`/dev/shm` of {sandbox.SHM_BYTES // 2**20} MB", f"at most {nbgrader_jobs.MAX_LINE // 1024} kB",
                 f"a cell {load_config(ROOT).Execute.timeout} s, a case of a check {lim.check_seconds} s", f"at most {lim.result_mb} MB a check cell",
                 f"runs within {lim.verdict_seconds} s", f"{lim.output_kb} kB an output and {lim.outputs_mb} MB a notebook",
                 f"over {lim.frame_bytes / 2**20:.1f} MB from the kernel",
                 f"after {Grader.deadline(type('G', (), {'limits': lim})())} s"]:
        assert said in text, said


@pytest.mark.parametrize("raises", [False, True])
def test_an_autograde_or_validate_that_raised_leaves_the_grading_budget_behind_in_no_process(tmp_path, monkeypatch, raises):
    """The formgrader runs nbgrader in the instructor's server: NBGRADER_EXECUTION left set there would put every
    notebook she runs afterwards on the grading budget (course_lib.runtime.grading). A missing kernel raises."""
    from nbformat.v4 import new_code_cell, new_notebook
    from nbgrader.validator import Validator

    from autograder.nbgrader_api import load_config

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("NBGRADER_VALIDATING", "hers")
    load_config(ROOT)  # the course's nbgrader_config.py, as every nbgrader command and the formgrader load it
    kernel = "no-such-kernel" if raises else "python3"
    seen = new_code_cell("import os\nassert os.environ.get('NBGRADER_EXECUTION') != 'validate', 'seen'", metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": "seen", "points": 1, "schema_version": 3}})
    nbformat.write(new_notebook(cells=[seen], metadata={"kernelspec": {"name": kernel, "display_name": kernel, "language": "python"}}),
                   tmp_path / "v.ipynb")
    if raises:
        with pytest.raises(Exception, match="no-such-kernel"):
            Validator().validate(str(tmp_path / "v.ipynb"))
    else:
        failed = Validator().validate(str(tmp_path / "v.ipynb"))["failed"]  # the kernel had it
        assert [f["source"] for f in failed] == [seen.source] and "AssertionError" in failed[0]["error"]
    assert "NBGRADER_EXECUTION" not in os.environ and os.environ["NBGRADER_VALIDATING"] == "hers"
