"""The exchange believes the file system, never a name (autograder.grading.exchange, intake.copy).

Real Unix users submit with nbgrader's own `submit` into a real exchange released by nbgrader's own
`release_assignment`; the instructor collects with nbgrader's `collect` and the course's
nbgrader_config.py. A classmate forging a submission in someone's name and dated 2099, ids made of
HTML and glob characters, deleting or renaming another's submission, a folder swapped for a link in
the middle of the copy, and a name that is not UTF-8: each time the honest students' work is
collected intact, and nothing else is collected under their names. Code a student hands in beside
her notebook is never collected: only what the assignment declares is."""
import contextlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell, new_notebook
from nbgrader.utils import parse_utc

from autograder.grading import exchange, intake, limits
from autograder.course import CACHE
from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"),
    reason="needs root, useradd and setpriv: the exchange takes a student's id from the Unix account that owns a "
           "submission, so each student here is a Unix account of their own, created for the test")]
COURSE = "seqcourse"


@contextlib.contextmanager
def unix_users(*names):
    """A Unix account for each student name, removed afterwards: {name: account}. The process id in the
    account keeps apart runs at once (two pytest workers) and any account the machine already has."""
    accounts = {name: f"{name}{os.getpid()}" for name in names}
    made = []
    try:
        for account in accounts.values():
            subprocess.run(["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", account],
                           check=True, capture_output=True, timeout=60)
            made.append(account)
        yield accounts
    finally:
        for account in made:
            subprocess.run(["userdel", account], capture_output=True, timeout=60)


def as_user(account, args, *, cwd, env=None, reach=False):
    """Run `args` as `account`: its uid and its group, no other group and no capability, but with
    reach=True CAP_DAC_READ_SEARCH alone. That only lets nbgrader start from an interpreter in a folder
    the account may not enter (pyenv's, in root's home): it reads and searches, never writes, and what
    it creates is the account's own. The attacks below run without it."""
    pw = pwd.getpwnam(account)
    caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"] if reach else []
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != CACHE}  # the run's cache is root's alone
    return subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", *caps, *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def home_for(account, top):
    """A home of the account's own, which only it may enter: nbgrader keeps a student's cache there."""
    home = Path(top) / account
    home.mkdir(mode=0o700)
    os.chown(home, pwd.getpwnam(account).pw_uid, pwd.getpwnam(account).pw_gid)
    return home


def student_env(home):
    """A student's environment: their home, the instructor's PATH, nothing of the instructor's Jupyter."""
    return {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1"}


def output(done):
    return done.stdout + done.stderr


class Exchange:
    """A course folder with the course's nbgrader_config.py, owned by an instructor's account of its own,
    an exchange set up as the README says, and students with homes, in a folder they may pass through.
    The instructor's nbgrader runs as that account, not as root."""

    def __init__(self, top, accounts):
        self.top, self.accounts = Path(top), accounts
        self.course, self.root = self.top / "course", self.top / "exchange"
        self.course.mkdir(mode=0o700)
        shutil.copy(ROOT / "nbgrader_config.py", self.course / "nbgrader_config.py")
        teacher = pwd.getpwnam(accounts["teacher"])
        os.chown(self.course, teacher.pw_uid, teacher.pw_gid)
        os.chown(self.course / "nbgrader_config.py", teacher.pw_uid, teacher.pw_gid)
        self.root.mkdir()
        os.chmod(self.root, 0o1777)  # README: the exchange's root, sticky like /tmp
        self.homes = {name: home_for(account, self.top) for name, account in accounts.items()}
        self.env = os.environ | {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        self.flags = [f"--Exchange.root={self.root}", f"--CourseDirectory.course_id={COURSE}"]
        self.inbound = self.root / COURSE / "inbound"

    def instructor(self, *args, ok=True):
        done = as_user(self.accounts["teacher"], [sys.executable, "-m", "nbgrader", *map(str, args), *self.flags], cwd=self.course,
                       env=self.env | {"HOME": str(self.homes["teacher"])}, reach=True)
        assert not ok or done.returncode == 0, output(done)[-4000:]
        return output(done)

    def release(self, assignment, data=()):
        """`nbgrader release_assignment` of a notebook and the files `data` names (paths in the assignment, str or bytes)."""
        folder = self.course / "notebooks" / assignment
        folder.mkdir(parents=True)
        nbformat.write(new_notebook(cells=[new_markdown_cell("the released notebook")]), folder / f"{assignment}.ipynb")
        for name in data:
            path = os.path.join(os.fsencode(folder), os.fsencode(name))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(b"the assignment's data")
        self.own(self.course / "notebooks", "teacher")
        return self.instructor("release_assignment", assignment)

    def own(self, top, name):
        """Make `top` and everything in it the account `name`'s."""
        account = pwd.getpwnam(self.accounts[name])
        for here, dirs, files in os.walk(os.fsencode(top)):
            for path in [here] + [os.path.join(here, n) for n in dirs + files]:
                os.chown(path, account.pw_uid, account.pw_gid)

    def submit(self, name, assignment, text):
        """`nbgrader submit` as the student, of a notebook that says `text`."""
        folder = self.homes[name] / assignment
        folder.mkdir(exist_ok=True)
        os.chown(folder, pwd.getpwnam(self.accounts[name]).pw_uid, -1)
        done = as_user(self.accounts[name], [sys.executable, "-c", SUBMIT, assignment, *self.flags], cwd=self.homes[name],
                       env=student_env(self.homes[name]) | {"SUBMIT_TEXT": text}, reach=True)
        assert done.returncode == 0, output(done)[-4000:]
        time.sleep(0.05)  # a later submission's ctime is later, on a file system with coarse times too

    def entries(self, name, assignment):
        """The names of a student's entries for the assignment in the inbound (listed by the instructor)."""
        return sorted(e for e in os.listdir(self.inbound) if e.startswith(f"{self.accounts[name]}+{assignment}+"))

    def collected(self, name, assignment):
        return self.course / "submitted" / self.accounts[name] / assignment

    def text(self, name, assignment):
        """What the notebook collected for the student says."""
        notebook = nbformat.read(self.collected(name, assignment) / f"{assignment}.ipynb", as_version=4)
        return notebook.cells[0].source

    def timestamp(self, name, assignment):
        return parse_utc((self.collected(name, assignment) / "timestamp.txt").read_text()).timestamp()


# the student writes their notebook, then submits it with nbgrader's own command line
SUBMIT = """import os, sys, nbformat
from nbformat.v4 import new_markdown_cell, new_notebook
assignment = sys.argv[1]
nbformat.write(new_notebook(cells=[new_markdown_cell(os.environ["SUBMIT_TEXT"])]), os.path.join(assignment, assignment + ".ipynb"))
from nbgrader.apps.nbgraderapp import main
sys.argv = ["nbgrader", "submit", *sys.argv[1:]]
main()
"""


@pytest.fixture(scope="module")
def accounts():
    with unix_users("ada", "ben", "mallory", "teacher") as made:
        yield made


@pytest.fixture
def ex(accounts):
    top = tempfile.mkdtemp(prefix="seqcourse-exchange-")
    os.chmod(top, 0o755)  # the students pass through it to the exchange and their homes
    try:
        yield Exchange(top, accounts)
    finally:
        shutil.rmtree(top)


def mallory_does(ex, script, *args):
    """A shell script run as mallory, with no capability: what any student may do in the exchange."""
    return as_user(ex.accounts["mallory"], ["/bin/sh", "-c", script, "sh", *args], cwd=ex.homes["mallory"],
                   env=student_env(ex.homes["mallory"]))


FORGE = """set -e
mkdir "$1"
printf '%s' "$2" > "$1/$3.ipynb"
printf '%s' "$4" > "$1/timestamp.txt"
touch -d "$4" "$1/$3.ipynb" "$1/timestamp.txt" "$1"
"""


def forge(ex, entry, assignment, text, date):
    """mallory makes an inbound entry of that name, her notebook saying `text`, dated `date` in every way
    she can: the name, timestamp.txt and the mtimes (utime); not the ctime."""
    notebook = nbformat.writes(new_notebook(cells=[new_markdown_cell(text)]))
    done = mallory_does(ex, FORGE, ex.inbound / entry, notebook, assignment, date)
    assert done.returncode == 0, output(done)


def test_a_forged_submission_in_a_classmates_name_and_dated_2099_is_not_theirs(ex):
    a, ada, mallory = "a_forgery", ex.accounts["ada"], ex.accounts["mallory"]
    ex.release(a)
    ex.submit("ada", a, "ada's own work")
    ex.submit("ben", a, "ben's own work")
    ex.submit("mallory", a, "mallory's own work")
    before = time.time()
    forge(ex, f"{ada}+{a}+2099-01-01 00:00:00.000000 UTC+forged", a, "blank, by mallory", "2099-01-01 00:00:00")
    # and one in her own name, made last but named and dated 1999: her latest, by the file system
    forge(ex, f"{mallory}+{a}+1999-01-01 00:00:00.000000 UTC+old", a, "mallory's last, dated 1999", "1999-01-01 00:00:00")
    log = ex.instructor("collect", a)
    assert ex.text("ada", a) == "ada's own work" and ex.text("ben", a) == "ben's own work"
    assert f"'{ada}+{a}+2099-01-01 00:00:00.000000 UTC+forged' is not collected: it claims to be '{ada}''s submission, " \
           f"but the account '{mallory}' owns it" in log
    assert ex.text("mallory", a) == "mallory's last, dated 1999"
    assert before - 1 < ex.timestamp("mallory", a) < time.time() + 1  # not 1999, nor 2099
    assert ex.timestamp("ada", a) < before
    # ada submits again: her resubmission wins over the forgery's 2099
    ex.submit("ada", a, "ada's second try")
    ex.instructor("collect", "--update", a)
    assert ex.text("ada", a) == "ada's second try" and ex.text("ben", a) == "ben's own work"
    assert before < ex.timestamp("ada", a) < time.time() + 1
    assert not any("blank, by mallory" in p.read_text() for p in (ex.course / "submitted").rglob("*.ipynb"))


def test_ids_with_html_or_glob_characters_are_never_collected(ex):
    a = "a_names"
    ex.release(a)
    ex.submit("ada", a, "ada's own work")
    for claimed in ("[a]da", "x<img src=x onerror=alert(1)>", "ada*"):
        forge(ex, f"{claimed}+{a}+2026-01-01 00:00:00.000000 UTC+x", a, "not a student", "2026-01-01 00:00:00")
    refused = ex.instructor("collect", "--student=[a]da", a, ok=False)  # a glob of ada, in nbgrader's own collect
    assert "the student id '[a]da' is not graded" in refused and not (ex.course / "submitted").exists()
    log = ex.instructor("collect", a)
    assert sorted(p.name for p in (ex.course / "submitted").iterdir()) == [ex.accounts["ada"]]
    assert ex.text("ada", a) == "ada's own work"
    for claimed in ("'[a]da'", "'x<img src=x onerror=alert(1)>'", "'ada*'"):
        assert f"the student id {claimed} is not graded" in log


def test_the_inbound_is_sticky_and_students_cannot_list_it_or_move_anothers_submission(ex):
    a = "a_sticky"
    ex.release(a)
    assert stat.S_IMODE(os.stat(ex.inbound).st_mode) == exchange.INBOUND_MODE == 0o3733
    ex.submit("ada", a, "ada's own work")
    ex.submit("ben", a, "ben's own work")
    [entry] = ex.entries("ada", a)
    listed = mallory_does(ex, 'ls "$1"', ex.inbound)
    assert listed.returncode != 0 and "Permission denied" in listed.stderr and entry not in listed.stdout
    for script in ('mv "$1/$2" "$1/$3"', 'rmdir "$1/$2"', 'mv "$1/$2" "$4"'):
        done = mallory_does(ex, script, ex.inbound, entry, f"{ex.accounts['mallory']}+{a}+stolen+x", ex.homes["mallory"] / "stolen")
        assert done.returncode != 0 and "Operation not permitted" in done.stderr, (script, output(done))
    assert ex.entries("ada", a) == [entry]
    # an inbound made by hand, listable and not sticky: collect says so, and collects what the owners say
    os.chmod(ex.inbound, 0o2777)
    log = ex.instructor("collect", a)
    assert "has no sticky bit" in log and "students may list it" in log
    assert ex.text("ada", a) == "ada's own work" and ex.text("ben", a) == "ben's own work"
    # and releasing again, as the instructor does for each assignment, makes it safe again
    ex.instructor("release_assignment", "--force", a)
    assert stat.S_IMODE(os.stat(ex.inbound).st_mode) == 0o3733


def test_a_folder_swapped_for_a_link_in_the_middle_of_the_copy_brings_nothing_in(ex, monkeypatch):
    # JupyterHub's users all `jovyan`: the student's uid is the one that may read the reference, so a
    # secret of that uid's stands in for solutions_lib. Between the look at sub/ and its copy (when
    # the copy makes submitted/.../sub), sub/ becomes a link to the secret's folder.
    from autograder.nbgrader_api import load_config
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    a, ada = "a_race", ex.accounts["ada"]
    ex.release(a, ["sub/notes.txt"])
    ex.submit("ada", a, "ada's own work")
    ex.submit("ben", a, "ben's own work")
    uid = pwd.getpwnam(ada).pw_uid
    secret = ex.top / "solutions_lib"
    secret.mkdir()
    (secret / "answers.py").write_text("THE REFERENCE")
    [entry] = ex.entries("ada", a)
    src = ex.inbound / entry
    (src / "sub").mkdir()
    (src / "sub" / "notes.txt").write_text("ada's notes")
    for path in (secret, secret / "answers.py", src / "sub", src / "sub" / "notes.txt"):
        os.chown(path, uid, -1)
    mkdir, swapped = os.mkdir, []

    def mkdir_then_swap(path, *args, **kwargs):
        mkdir(path, *args, **kwargs)
        if os.path.basename(os.fsdecode(path)) == "sub" and not swapped:
            os.rename(src / "sub", src / "sub-moved")
            os.symlink(secret, src / "sub")
            swapped.append(path)

    config = load_config(ex.course)
    config.Exchange.root, config.CourseDirectory.course_id = str(ex.root), COURSE
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # nbgrader runs alembic from it
    with monkeypatch.context() as patched:
        patched.setattr(os, "mkdir", mkdir_then_swap)
        result = api.collect(a)
    assert result["success"], result
    assert swapped, "the copy never made sub/: the swap did not happen"
    collected = ex.collected("ada", a)
    assert not any(b"THE REFERENCE" in p.read_bytes() for p in collected.rglob("*") if p.is_file() and not p.is_symlink())
    assert not any(p.is_symlink() for p in collected.rglob("*"))
    assert (collected / "sub" / "notes.txt").read_text() == "ada's notes"  # the folder that was looked at
    assert ex.text("ada", a) == "ada's own work" and ex.text("ben", a) == "ben's own work"


def test_a_name_that_is_not_utf8_is_collected_without_a_crash(ex):
    a, ada = "a_bytes", ex.accounts["ada"]
    ex.release(a, [b"notes\xff.txt"])  # the assignment's own data file, by a name in bytes
    ex.submit("ada", a, "ada's own work")
    ex.submit("ben", a, "ben's own work")
    [entry] = ex.entries("ada", a)
    done = as_user(ada, ["/bin/sh", "-c", "printf 'mine' > \"$1/$(printf 'notes\\377.txt')\"", "sh", ex.inbound / entry],
                   cwd=ex.homes["ada"], env=student_env(ex.homes["ada"]))
    assert done.returncode == 0, output(done)
    assert b"notes\xff.txt" in os.listdir(os.fsencode(ex.inbound / entry))
    ex.instructor("collect", a)
    collected = os.fsencode(ex.collected("ada", a))
    with open(os.path.join(collected, b"notes\xff.txt"), "rb") as fh:
        assert fh.read() == b"mine"
    assert intake.problem(collected, limits.load(ROOT)) == ""
    assert ex.text("ada", a) == "ada's own work" and ex.text("ben", a) == "ben's own work"


def test_code_beside_her_notebook_is_left_out_of_submitted_and_named(ex):
    # she puts what Python would run for the instructor beside her notebook and submits it with nbgrader's own submit:
    # collect takes her notebook and the assignment's data file, and names what it left out
    a = "a_code"
    ex.release(a, ["data/words.txt"])
    folder = ex.homes["ada"] / a
    planted = ["ipykernel_launcher.py", "torch.py", "sitecustomize.py", "helpers/__init__.py", "data/helper.py", "mine/notes.txt"]
    for name in [*planted, "data/words.txt"]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("open('/tmp/seqcourse-planted-code-ran', 'w')" if name.endswith(".py") else "hers")
    ex.own(folder, "ada")
    ex.submit("ada", a, "ada's own work")
    ex.submit("ben", a, "ben's own work")
    log = ex.instructor("collect", a)
    collected = ex.collected("ada", a)
    assert sorted(p.relative_to(collected).as_posix() for p in collected.rglob("*")) == [
        intake.LEFT_OUT, f"{a}.ipynb", "data", "data/words.txt", "submission_secret.txt", "timestamp.txt"]
    shown = ["'data/helper.py'", "'helpers'", "'ipykernel_launcher.py'", "'mine'", "'sitecustomize.py'", "'torch.py'"]
    assert "left out as no part of the assignment" in log and all(name in log for name in shown), log
    # what `grade` reads: graded as ever, and the note for grading_problems.csv
    course_limits = limits.load(ROOT)
    assert intake.problem(collected, course_limits) == ""
    why = intake.left_out(collected, intake.declared(ex.course / "notebooks" / a), course_limits)
    assert why.startswith("nbgrader collect left out") and all(name in why for name in shown), why
    assert ex.text("ada", a) == "ada's own work" and ex.text("ben", a) == "ben's own work"
    assert not (ex.collected("ben", a) / intake.LEFT_OUT).exists()
