"""A submission is data until grading's sandbox runs it (autograder.grading.intake, autograder.lab).

A student puts a `torch.py`, an `ipykernel_launcher.py`, a `sitecustomize.py` and a package beside her notebook.
`grade` and plain `nbgrader autograde` of a submitted/ folder an instructor filled by hand copy none of it into
autograded/ (nor so into the sandbox or feedback/), say so in grading_problems.csv and grade her notebook as her
honest classmate's; the instructor's JupyterLab starts no kernel in submitted/, autograded/ or feedback/ (a real Jupyter
server with jupyter-config/instructor answers why), nbgrader's Validate runs no submission, and a kernel started
beside her files anywhere else, as JupyterLab starts one, imports none of them. nbgrader's collect is tested in
test_exchange.py (it needs Unix accounts) and intake's copy in test_intake.py."""
import asyncio
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
import torch
from jupyter_client.manager import AsyncKernelManager
from nbformat.v4 import new_code_cell, new_notebook
from tornado import web
from traitlets.utils.importstring import import_item

from autograder import lab
from autograder.grading.grade import Grader, read_grades, read_problems
from conftest import ROOT
from test_bad_submissions import FULL, NAME, complete
from test_pages import Server

INSTRUCTOR = ROOT / "jupyter-config" / "instructor"
PLANTED = ("ipykernel_launcher.py", "torch.py", "sitecustomize.py", "helpers/__init__.py")


def plant(folder, marker):
    """Her files beside the notebook in `folder`: each writes `marker` (and names itself there) if any Python runs it."""
    for name in PLANTED:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"open({str(marker)!r}, 'a').write({name!r} + ' ran\\n')\nraise SystemExit('planted code ran')\n")


def a_notebook(code="x = 1"):
    return new_notebook(cells=[new_code_cell(code)], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                              "language": "python"}})


@pytest.fixture
def course(tmp_path):
    """A course folder: the instructor's source, her submission in submitted/ and where grading puts it, and a copy
    of it elsewhere (a folder with no mark of a submission: the kernel may start there, and must import none of it)."""
    course, marker = tmp_path / "course", tmp_path / "planted-code-ran"
    for folder in (f"submitted/eve/{NAME}", f"autograded/eve/{NAME}", f"feedback/eve/{NAME}", "downloads/eve", f"solutions/{NAME}"):
        (course / folder).mkdir(parents=True)
        nbformat.write(a_notebook(), course / folder / f"{NAME}.ipynb")
        if not folder.startswith("solutions"):
            plant(course / folder, marker)
    (course / "inbound-copy").mkdir()  # an exchange entry copied by hand: nbgrader's submit leaves a timestamp.txt
    (course / "inbound-copy" / "timestamp.txt").write_text("2026-12-01 10:00:00.000000 UTC")
    (course / "nbgrader_config.py").write_bytes((ROOT / "nbgrader_config.py").read_bytes())
    return course, marker


def without_safe_path():
    """This process's environment without PYTHONSAFEPATH: a server started otherwise than by `make lab-instructor`."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}


def instructor_kernels(root):
    """The kernel manager jupyter-config/instructor gives the instructor's Jupyter server, on `root`."""
    config = json.loads((INSTRUCTOR / "jupyter_server_config.json").read_text())
    return import_item(config["ServerApp"]["kernel_manager_class"])(root_dir=str(root))


async def run_in(km, code):
    """What `code` prints in the started kernel manager `km`'s kernel."""
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        out = []
        await client.execute_interactive(code, output_hook=out.append, timeout=60)
        return "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
    finally:
        client.stop_channels()


WHICH_TORCH = "import sys, torch\nprint(torch.__file__, '' in sys.path)"
REAL_TORCH = [torch.__file__, "False"]  # what WHICH_TORCH prints where nothing of the folder is on the import path


# ---------------------------------------------------------------- the instructor's kernels


@pytest.mark.parametrize("where", [f"submitted/eve/{NAME}", f"autograded/eve/{NAME}", f"feedback/eve/{NAME}",
                                   "submitted", "inbound-copy"])
def test_no_kernel_starts_in_a_folder_holding_a_submission(course, where):
    course, marker = course
    km = instructor_kernels(course)
    with pytest.raises(web.HTTPError) as refused:
        asyncio.run(km.start_kernel(path=f"{where}/{NAME}.ipynb", kernel_name="python3"))
    assert refused.value.status_code == 403
    assert refused.value.log_message.startswith(lab.SANDBOX_ONLY) and where.split("/")[0] in refused.value.log_message
    assert km.list_kernel_ids() == [] and not marker.exists()


def test_a_kernel_beside_her_files_elsewhere_imports_none_of_them(course):
    # as JupyterLab starts one: the server's kernel manager, the notebook's folder its working folder
    course, marker = course
    km = instructor_kernels(course)

    async def started():
        await km.start_kernel(path=f"downloads/eve/{NAME}.ipynb", kernel_name="python3", env=without_safe_path())
        try:
            return await run_in(km.get_kernel(km.list_kernel_ids()[0]), WHICH_TORCH)
        finally:
            await km.shutdown_all(now=True)

    printed = asyncio.run(started())
    assert printed.split() == REAL_TORCH, printed
    assert not marker.exists(), marker.read_text()
    assert lab.submission_at(ROOT / "solutions" / NAME) == ""  # the instructor's own notebooks start kernels


def test_the_instructors_lab_keeps_a_kernels_folder_off_its_import_path(course):
    # any kernel the lab's server starts (nbclient's too, as nbgrader's Validate does), through its environment alone
    course, marker = course
    env = lab.lab_env("instructor", ROOT, without_safe_path())
    assert env["PYTHONSAFEPATH"] == "1" and "PYTHONSAFEPATH" not in lab.lab_env("student", ROOT, without_safe_path())

    async def started():
        km = AsyncKernelManager(kernel_name="python3")
        await km.start_kernel(cwd=str(course / "downloads" / "eve"), env=env)
        try:
            return await run_in(km, WHICH_TORCH)
        finally:
            await km.shutdown_kernel(now=True)

    printed = asyncio.run(started())
    assert printed.split() == REAL_TORCH, printed
    assert not marker.exists(), marker.read_text()


def test_nbgrader_validate_runs_no_submission(course, monkeypatch):
    # the instructor's lab's Validate button: nbgrader's Validator, configured as its handler loads its configuration
    from nbgrader.apps import NbGrader
    from nbgrader.validator import Validator

    course, marker = course
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(INSTRUCTOR))
    app = NbGrader()
    app.load_config_file()
    path = course / "submitted" / "eve" / NAME / f"{NAME}.ipynb"
    nbformat.write(a_notebook(f"open({str(marker)!r}, 'a').write('her notebook ran')"), path)
    with pytest.raises(PermissionError, match=re.escape(lab.SANDBOX_ONLY)):
        Validator(config=app.config).validate(str(path))
    assert not marker.exists()


def test_a_jupyter_server_with_the_instructors_configuration_says_why(course, tmp_path):
    # a real server (started as Kubernetes' and the hub's are, with no PYTHONSAFEPATH of its own): the formgrader
    # still serves, the instructor's own notebook gets its kernel, a submitted one gets the reason instead
    course, marker = course
    server = Server(course, tmp_path)
    try:
        refused = session(server, f"submitted/eve/{NAME}/{NAME}.ipynb")
        assert refused[1]["message"] == lab.submission_at(course / "submitted" / "eve" / NAME), refused
        assert request(server, "GET", "/api/kernels")[1] == []
        started = session(server, f"solutions/{NAME}/{NAME}.ipynb")
        assert started[0] == 201, started
        request(server, "DELETE", f"/api/sessions/{started[1]['id']}")
        assert server.get("/formgrader/manage_assignments")[0] == 200
        assert not marker.exists()
    finally:
        server.stop()


def request(server, method, path, body=None):
    """(status, JSON answer) of an API request to `server`."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{server.url}{path}?token={server.token}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def session(server, path):
    """JupyterLab's request when it opens the notebook `path`: a session, with a kernel started in its folder."""
    return request(server, "POST", "/api/sessions", {"path": path, "name": Path(path).name, "type": "notebook",
                                                     "kernel": {"name": "python3"}})


# ---------------------------------------------------------------- grading: nothing of hers beyond the notebook


@pytest.fixture(scope="module")
def hand_filled(tmp_path_factory):
    """Two courses whose submitted/ an instructor filled by hand, graded at once: by `grade`, eve's complete notebook
    with her files beside it and ada's, the same notebook alone; by plain `nbgrader autograde`, eve's."""
    marker = tmp_path_factory.mktemp("marker") / "planted-code-ran"
    courses = {how: tmp_path_factory.mktemp(how) for how in ("grade", "nbgrader")}
    for course, student in [(courses["grade"], "ada"), (courses["grade"], "eve"), (courses["nbgrader"], "eve")]:
        folder = course / "submitted" / student / NAME
        folder.mkdir(parents=True)
        nbformat.write(complete(), folder / f"{NAME}.ipynb")
        if student == "eve":
            plant(folder, marker)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        graded = pool.submit(Grader(courses["grade"], root=ROOT, log=lambda *a: None).run, jobs=1, progress=False)
        log = pool.submit(plain_nbgrader, courses["nbgrader"]).result()
        graded.result()
    return {**courses, "log": log, "marker": marker}


def plain_nbgrader(course):
    """The log of `nbgrader generate_assignment`, `autograde` and `export` in `course`, with the course's configuration."""
    (course / "solutions").symlink_to(ROOT / "solutions")
    (course / "nbgrader_config.py").write_text(f"c = get_config()\nload_subconfig({str(ROOT / 'nbgrader_config.py')!r})\n"
                                               f"c.CourseDirectory.root = {str(course)!r}\n"
                                               f"c.CourseDirectory.db_url = 'sqlite:///{course}/gradebook.db'\n")
    env = os.environ | {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    log = ""
    for command in (["generate_assignment", NAME, "--force"], ["autograde", NAME], ["export"]):
        done = subprocess.run([sys.executable, "-m", "nbgrader", *command], cwd=course, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        log += done.stdout + done.stderr
    return log


def found_planted(course):
    """Her files anywhere grading writes: autograded/ and feedback/."""
    return [p for kind in ("autograded", "feedback") for p in (course / kind).rglob("*")
            if p.name in {Path(n).name for n in PLANTED} or p.name == "helpers"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["grade", "nbgrader"])
def test_grading_copies_nothing_of_hers_but_the_notebook_and_grades_it_as_her_classmates(hand_filled, how):
    course = hand_filled[how]
    assert found_planted(course) == []
    assert (course / "autograded" / "eve" / NAME / f"{NAME}.ipynb").exists()
    classmates = {"ada": FULL} if how == "grade" else {}  # graded beside her, the same notebook without her files
    assert {g["student_id"]: float(g["score"]) for g in read_grades(course)} == classmates | {"eve": FULL}
    assert not hand_filled["marker"].exists()


@pytest.mark.slow
def test_grading_says_what_it_left_out(hand_filled):
    [row] = read_problems(hand_filled["grade"])
    assert row["student_id"] == "eve" and row["reason"].startswith("left out as no part of the assignment"), row
    assert all(f"'{name}'" in row["reason"] for name in ("ipykernel_launcher.py", "torch.py", "sitecustomize.py", "helpers"))
    assert "eve/05_self_attention: left out as no part of the assignment" in hand_filled["log"]
