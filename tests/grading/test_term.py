"""An instructor's term with nbgrader's own tools around `grade`, in a clone of the course:
a local exchange, three students fetching and submitting, collect, grade with two jobs, a
manual grade in the gradebook, a resubmission collected with --update, regrading, export,
release_feedback and the students fetching their feedback. Nothing of theirs reaches git."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder import registry
from autograder.course import sqlite_url
from autograder.grading import csp, intake
from autograder.grading.grade import read_grades, read_problems
from autograder.release import fill_submission, mistake_source
from conftest import ROOT

pytestmark = pytest.mark.slow
NAME = "05_self_attention"
FULL = sum(ex.points for ex in registry.for_notebook(NAME))
# nbgrader takes a student's id from the account name, except on JupyterHub's shared "jovyan" account
AS_STUDENT = "import sys, nbgrader.utils as u; u.get_osusername = lambda: 'jovyan'; from nbgrader.apps.nbgraderapp import main; sys.argv[0] = 'nbgrader'; main()"


def sh(*args, cwd, env=None, ok=True):
    done = subprocess.run(list(map(str, args)), cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if ok:
        assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    top = tmp_path_factory.mktemp("term")
    course, exchange = top / "course", top / "exchange"
    exchange.mkdir()
    # a clone of this working tree, committed, as an instructor has it
    files = sh("git", "ls-files", "-co", "--exclude-standard", cwd=ROOT).stdout.split("\n")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (course / name).parent.mkdir(parents=True, exist_ok=True)
            (course / name).write_bytes((ROOT / name).read_bytes())
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "course"]):
        sh("git", *args, cwd=course)
    env = os.environ | {"PYTHONPATH": str(course), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    exchange_flags = [f"--Exchange.root={exchange}", "--CourseDirectory.course_id=seqcourse"]

    def instructor(*args):
        return sh(sys.executable, "-m", "nbgrader", *args, *exchange_flags, cwd=course, env=env)

    def student(who, *args):
        home = top / who
        home.mkdir(exist_ok=True)
        # a home of their own: nbgrader keeps each student's submissions in ~/.local/share/jupyter
        return sh(sys.executable, "-c", AS_STUDENT, *args, *exchange_flags, cwd=home, env=env | {"JUPYTERHUB_USER": who, "HOME": str(home)})

    def grade():
        return sh(sys.executable, "-m", "autograder", "grade", ".", "--jobs", "2", "--no-progress", cwd=course, env=env)

    solution = nbformat.read(ROOT / "solutions" / NAME / f"{NAME}.ipynb", as_version=4)
    instructor("generate_assignment", NAME, "--force")
    instructor("release_assignment", NAME)
    work = {}
    for who in ("ada", "ben", "cy"):
        student(who, "fetch_assignment", NAME)
        path = top / who / NAME / f"{NAME}.ipynb"
        released = nbformat.read(path, as_version=4)
        mistakes = {ex: mistake_source(ex, next(m for m in registry.get(ex).mistakes if m.name == mistake))
                    for ex, mistake in registry.demo_mistakes(NAME)}
        work[who] = {"ada": fill_submission(released, solution), "ben": released,
                     "cy": fill_submission(released, solution, mistakes)}[who]
        nbformat.write(work[who], path)
        student(who, "submit", NAME)
    # mallory submits too, then plants a link to the solutions and a pipe in her submission in the exchange,
    # where she may write: collect copies neither, and says so
    student("mallory", "fetch_assignment", NAME)
    student("mallory", "submit", NAME)
    inbound = next((exchange / "seqcourse" / "inbound").glob(f"mallory+{NAME}+*"))
    (inbound / "answers.ipynb").symlink_to(course / "solutions" / NAME / f"{NAME}.ipynb")
    os.mkfifo(inbound / "notes.txt")
    instructor("collect", NAME)
    collected = course / "submitted" / "mallory" / NAME
    mallory = {"files": sorted(p.name for p in collected.iterdir()), "links": [p for p in collected.rglob("*") if p.is_symlink()]}
    grade()
    first = {g["student_id"]: float(g["score"]) for g in read_grades(course)}

    # the instructor gives ben a point of extra credit in the formgrader (here, through nbgrader's API)
    with Gradebook(sqlite_url(course / "gradebook.db")) as gb:
        gb.find_grade("check_causal_mask", NAME, NAME, "ben").extra_credit = 1.0
        gb.db.commit()
    # cy fixes her mistakes and submits again; collect needs --update to take the new submission
    nbformat.write(work["ada"], top / "cy" / NAME / f"{NAME}.ipynb")
    student("cy", "submit", NAME)
    instructor("collect", "--update", NAME)
    second_run = grade().stdout
    second = {g["student_id"]: float(g["score"]) for g in read_grades(course)}

    # on an image whose course_lib lacks a helper, the setup cell fails, and so does validation
    old_image = top / "old_image" / "course_lib"
    old_image.mkdir(parents=True)
    (old_image / "__init__.py").write_text("")
    (old_image / "plotting.py").write_text("raise ImportError('this image was built before course_lib had plotting')")
    validated = sh(sys.executable, "-m", "nbgrader", "validate", top / "ada" / NAME / f"{NAME}.ipynb", cwd=top / "ada",
                   env=env | {"PYTHONPATH": f"{old_image.parent}:{course}"}, ok=False)

    instructor("export", "--to", str(top / "export.csv"))
    instructor("release_feedback", NAME)
    for who in ("ada", "ben", "cy", "mallory"):
        student(who, "fetch_feedback", NAME)
    return {"top": top, "course": course, "first": first, "second": second, "second_run": second_run, "mallory": mallory,
            "problems": read_problems(course),
            "validated": validated.stdout + validated.stderr,
            "status": sh("git", "status", "--porcelain", "--untracked-files=all", cwd=course).stdout}


def test_the_first_grading(term):
    assert term["first"]["ada"] == FULL and term["first"]["ben"] == 0 and 0 < term["first"]["cy"] < FULL


def test_collect_takes_no_link_or_pipe_out_of_the_exchange_and_grading_says_why(term):
    assert term["mallory"]["links"] == [] and term["mallory"]["files"] == [intake.REFUSED, f"{NAME}.ipynb", "submission_secret.txt", "timestamp.txt"]
    assert term["first"]["mallory"] == 0 and term["second"]["mallory"] == 0
    reason = next(p["reason"] for p in term["problems"] if p["student_id"] == "mallory")
    assert "nbgrader collect refused this submission: 'answers.ipynb' is a link" in reason and "'notes.txt' is a pipe" in reason
    page = next((term["top"] / "mallory" / NAME / "feedback").rglob(f"{NAME}.html")).read_text()
    assert "not graded" in page and "answers.ipynb" in page
    assert page.count(f'<meta http-equiv="Content-Security-Policy" content="{csp.FEEDBACK_POLICY}">') == 1


def test_a_resubmission_is_regraded_and_a_manual_grade_survives(term):
    assert term["second"] == {"ada": FULL, "ben": 1.0, "cy": FULL, "mallory": 0}
    assert "graded 1, unchanged 2, failed 1" in term["second_run"]


def test_nbgrader_export_agrees_with_grades_csv(term):
    assert (term["top"] / "export.csv").read_text() == (term["course"] / "grades.csv").read_text()


def test_students_fetch_feedback_that_shows_their_grade(term):
    import html
    import re

    for who, scores in (("ada", [FULL]), ("ben", [1.0]), ("cy", [FULL])):  # cy's: for the submission collected last
        pages = sorted((term["top"] / who / NAME / "feedback").rglob(f"{NAME}.html"))
        shown = [float(re.search(r"\(Score: ([0-9.]+) / ", html.unescape(p.read_text())).group(1)) for p in pages]
        assert shown == scores, (who, shown)
        for p in pages:  # written by nbgrader's generate_feedback, with the course's policy first in the head
            head = p.read_text().split("<head>", 1)[1]
            assert head.lstrip().startswith(f'<meta http-equiv="Content-Security-Policy" content="{csp.FEEDBACK_POLICY}">'), p


def test_nothing_of_the_students_reaches_git(term):
    assert term["status"] == ""


def test_validate_fails_where_the_setup_cell_fails(term):
    assert "VALIDATION FAILED" in term["validated"] and "NameError: name 'check' is not defined" in term["validated"]
