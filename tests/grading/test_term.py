"""An instructor's term with nbgrader's own tools around `grade`, in a clone of the course:
a local exchange, three students (Unix accounts of their own, as the exchange needs) fetching and
submitting, collect, grade with two jobs, a manual grade in the gradebook, a resubmission
collected with --update, regrading, export, release_feedback and the students fetching their
feedback. Nothing of theirs reaches git."""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder import registry
from autograder.course import sqlite_url
from autograder.grading import intake
from autograder.grading.pages import policy
from autograder.grading.grade import read_grades, read_problems
from autograder.release import fill_submission, mistake_source
from conftest import ROOT
from test_exchange import as_user, home_for, pytestmark as needs_accounts, student_env, unix_users

pytestmark = needs_accounts  # slow, and root to make the students' accounts
NAME = "05_self_attention"
FULL = sum(ex.points for ex in registry.for_notebook(NAME))
STUDENTS = ("ada", "ben", "cy", "mallory")


def sh(*args, cwd, env=None, ok=True):
    done = subprocess.run(list(map(str, args)), cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if ok:
        assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    # the exchange and the students' homes, in a folder the students may pass through
    with unix_users(*STUDENTS) as accounts:
        shared = Path(tempfile.mkdtemp(prefix="seqcourse-term-"))
        try:
            os.chmod(shared, 0o755)
            yield _term(tmp_path_factory.mktemp("term"), shared, accounts)
        finally:
            shutil.rmtree(shared)


def _term(top, shared, accounts):
    """The term, with results keyed by the students' names (their ids are their accounts')."""
    course, exchange = top / "course", shared / "exchange"
    exchange.mkdir()
    os.chmod(exchange, 0o1777)  # README: the exchange's root, sticky like /tmp
    homes = {who: home_for(accounts[who], shared) for who in STUDENTS}
    name_of = {account: who for who, account in accounts.items()}
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
        # as the student's own account, from a home of their own: nbgrader keeps their submissions in ~/.local/share/jupyter
        done = as_user(accounts[who], [sys.executable, "-m", "nbgrader", *args, *exchange_flags], cwd=homes[who],
                       env=student_env(homes[who]), reach=True)
        assert done.returncode == 0, f"{who} {args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    def write(notebook, path):
        nbformat.write(notebook, path)
        os.chown(path, Path(path).parent.stat().st_uid, -1)

    def grade():
        return sh(sys.executable, "-m", "autograder", "grade", ".", "--jobs", "2", "--no-progress", cwd=course, env=env)

    solution = nbformat.read(ROOT / "solutions" / NAME / f"{NAME}.ipynb", as_version=4)
    instructor("generate_assignment", NAME, "--force")
    instructor("release_assignment", NAME)
    work = {}
    for who in ("ada", "ben", "cy"):
        student(who, "fetch_assignment", NAME)
        path = homes[who] / NAME / f"{NAME}.ipynb"
        released = nbformat.read(path, as_version=4)
        mistakes = {ex: mistake_source(ex, next(m for m in registry.get(ex).mistakes if m.name == mistake))
                    for ex, mistake in registry.demo_mistakes(NAME)}
        work[who] = {"ada": fill_submission(released, solution), "ben": released,
                     "cy": fill_submission(released, solution, mistakes)}[who]
        write(work[who], path)
        student(who, "submit", NAME)
    # mallory submits too, then plants a link to the solutions and a pipe in her submission in the exchange,
    # where she may write: collect copies neither, and says so
    student("mallory", "fetch_assignment", NAME)
    student("mallory", "submit", NAME)
    inbound = next((exchange / "seqcourse" / "inbound").glob(f"{accounts['mallory']}+{NAME}+*"))
    (inbound / "answers.ipynb").symlink_to(course / "solutions" / NAME / f"{NAME}.ipynb")
    os.mkfifo(inbound / "notes.txt")
    instructor("collect", NAME)
    collected = course / "submitted" / accounts["mallory"] / NAME
    mallory = {"files": sorted(p.name for p in collected.iterdir()), "links": [p for p in collected.rglob("*") if p.is_symlink()]}
    grade()
    first = {name_of[g["student_id"]]: float(g["score"]) for g in read_grades(course)}

    # the instructor gives ben a point of extra credit in the formgrader (here, through nbgrader's API)
    with Gradebook(sqlite_url(course / "gradebook.db")) as gb:
        gb.find_grade("check_causal_mask", NAME, NAME, accounts["ben"]).extra_credit = 1.0
        gb.db.commit()
    # cy fixes her mistakes and submits again; collect needs --update to take the new submission
    write(work["ada"], homes["cy"] / NAME / f"{NAME}.ipynb")
    student("cy", "submit", NAME)
    instructor("collect", "--update", NAME)
    second_run = grade().stdout
    second = {name_of[g["student_id"]]: float(g["score"]) for g in read_grades(course)}

    # on an image whose course_lib lacks a helper, the setup cell fails, and so does validation
    old_image = top / "old_image" / "course_lib"
    old_image.mkdir(parents=True)
    (old_image / "__init__.py").write_text("")
    (old_image / "plotting.py").write_text("raise ImportError('this image was built before course_lib had plotting')")
    validated = sh(sys.executable, "-m", "nbgrader", "validate", homes["ada"] / NAME / f"{NAME}.ipynb", cwd=homes["ada"],
                   env=env | {"PYTHONPATH": f"{old_image.parent}:{course}"}, ok=False)

    instructor("export", "--to", str(top / "export.csv"))
    instructor("release_feedback", NAME)
    for who in ("ada", "ben", "cy", "mallory"):
        student(who, "fetch_feedback", NAME)
    feedback = {who: sorted((homes[who] / NAME / "feedback").rglob(f"{NAME}.html")) for who in STUDENTS}
    return {"top": top, "course": course, "first": first, "second": second, "second_run": second_run, "mallory": mallory,
            "problems": [p | {"student_id": name_of.get(p["student_id"], p["student_id"])} for p in read_problems(course)],
            "feedback": {who: [p.read_text() for p in pages] for who, pages in feedback.items()},
            "validated": validated.stdout + validated.stderr,
            "status": sh("git", "status", "--porcelain", "--untracked-files=all", cwd=course).stdout}


def test_the_first_grading(term):
    assert term["first"]["ada"] == FULL and term["first"]["ben"] == 0 and 0 < term["first"]["cy"] < FULL


def test_collect_takes_no_link_or_pipe_out_of_the_exchange_and_grading_says_why(term):
    assert term["mallory"]["links"] == [] and term["mallory"]["files"] == [intake.REFUSED, f"{NAME}.ipynb", "submission_secret.txt", "timestamp.txt"]
    assert term["first"]["mallory"] == 0 and term["second"]["mallory"] == 0
    reason = next(p["reason"] for p in term["problems"] if p["student_id"] == "mallory")
    assert "nbgrader collect refused this submission: 'answers.ipynb' is a link" in reason and "'notes.txt' is a pipe" in reason
    page = term["feedback"]["mallory"][0]
    assert "not graded" in page and "answers.ipynb" in page
    assert page.count(f'<meta http-equiv="Content-Security-Policy" content="{policy.FEEDBACK_POLICY}">') == 1


def test_a_resubmission_is_regraded_and_a_manual_grade_survives(term):
    assert term["second"] == {"ada": FULL, "ben": 1.0, "cy": FULL, "mallory": 0}
    assert "graded 1, unchanged 2, failed 1" in term["second_run"]


def test_nbgrader_export_agrees_with_grades_csv(term):
    assert (term["top"] / "export.csv").read_text() == (term["course"] / "grades.csv").read_text()


def test_students_fetch_feedback_that_shows_their_grade(term):
    import html
    import re

    for who, scores in (("ada", [FULL]), ("ben", [1.0]), ("cy", [FULL])):  # cy's: for the submission collected last
        pages = term["feedback"][who]
        shown = [float(re.search(r"\(Score: ([0-9.]+) / ", html.unescape(p)).group(1)) for p in pages]
        assert shown == scores, (who, shown)
        for p in pages:  # written by nbgrader's generate_feedback, with the course's policy first in the head
            head = p.split("<head>", 1)[1]
            assert head.lstrip().startswith(f'<meta http-equiv="Content-Security-Policy" content="{policy.FEEDBACK_POLICY}">'), who


def test_nothing_of_the_students_reaches_git(term):
    assert term["status"] == ""


def test_validate_fails_where_the_setup_cell_fails(term):
    assert "VALIDATION FAILED" in term["validated"] and "NameError: name 'check' is not defined" in term["validated"]
