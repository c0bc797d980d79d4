"""Files in (autograder.grading.intake): a submission folder is looked at without following anything,
and refused for a link, a special file or a size over the limits; collect copies without following, and
only what the assignment declares: never a module beside the notebook."""
import os
import socket

import pytest

from autograder.grading import intake, limits
from conftest import ROOT

LIMITS = limits.load(ROOT)


@pytest.fixture
def folder(tmp_path):
    f = tmp_path / "submitted" / "eve" / "05_self_attention"
    f.mkdir(parents=True)
    (f / "05_self_attention.ipynb").write_text("{}")
    (f / "data").mkdir()
    (f / "data" / "notes.txt").write_text("mine")
    return f


@pytest.fixture
def source(tmp_path):
    """The assignment's source folder, as an instructor lays it out: the notebook, data files, a helper module."""
    f = tmp_path / "source" / "05_self_attention"
    (f / "data").mkdir(parents=True)
    (f / "__pycache__").mkdir()
    for name in ("05_self_attention.ipynb", "data/notes.txt", "data/later.txt", "data/helper.py", "__pycache__/helper.cpython-311.pyc"):
        (f / name).write_text("the instructor's")
    return f


@pytest.fixture
def takes(source):
    return intake.declared(source, ignore=["__pycache__", ".ipynb_checkpoints"])


def test_plain_files_and_folders_pass(folder):
    assert intake.problem(folder, LIMITS) == ""


def _sparse(path, size):
    with open(path, "wb") as fh:
        fh.truncate(size)


SPOILERS = {
    "a link to a file": (lambda f: (f / "data" / "ref.py").symlink_to("/etc/passwd"), "'data/ref.py' is a link"),
    "a relative link": (lambda f: (f / "up").symlink_to("../../.."), "'up' is a link"),
    "a dangling link": (lambda f: (f / "gone").symlink_to(f / "nowhere"), "'gone' is a link"),
    "the notebook a link": (lambda f: ((f / "05_self_attention.ipynb").unlink(), (f / "05_self_attention.ipynb").symlink_to("/etc/passwd")),
                            "'05_self_attention.ipynb' is a link"),
    "a pipe": (lambda f: os.mkfifo(f / "data" / "pipe"), "is a pipe"),
    "a socket": (lambda f: socket.socket(socket.AF_UNIX).bind(os.path.relpath(f / "sock")), "is a socket"),
    "a file over the limit": (lambda f: _sparse(f / "big.bin", (LIMITS.submission_file_mb + 1) * 2**20), "MB, more than"),
    "a folder over the limit": (lambda f: [_sparse(f / f"part{i}", LIMITS.submission_file_mb * 2**20) for i in range(LIMITS.submission_folder_mb // LIMITS.submission_file_mb + 1)],
                                "total more than"),
    "too many files": (lambda f: [(f / f"n{i}").write_text("") for i in range(LIMITS.submission_entries + 1)], "more than"),
    "folders too deep": (lambda f: (f / os.path.join(*["d"] * 20)).mkdir(parents=True), "nested more than"),
    "the course's own note": (lambda f: (f / "data" / intake.REFUSED).write_text("x"), "a name the course reserves"),
    "the course's other note": (lambda f: (f / "data" / intake.LEFT_OUT).write_text("x"), "a name the course reserves"),
}


@pytest.mark.parametrize("spoil", list(SPOILERS.values()), ids=list(SPOILERS))
def test_anything_but_plain_files_is_refused(folder, spoil, monkeypatch):
    monkeypatch.chdir(folder.parent)  # a socket's path must be short
    make, says = spoil
    make(folder)
    assert says in intake.problem(folder, LIMITS)


def test_a_linked_folder_is_refused_and_its_target_never_listed(folder, tmp_path):
    (tmp_path / "submitted" / "mallory").mkdir()
    linked = tmp_path / "submitted" / "mallory" / folder.name
    linked.symlink_to(folder)
    assert "is a link, not a folder" in intake.problem(linked, LIMITS)
    (tmp_path / "submitted" / "trudy").symlink_to(folder.parent)
    assert "is a link, not a folder" in intake.problem(tmp_path / "submitted" / "trudy" / folder.name, LIMITS)


def test_names_are_shown_quoted_and_short():
    assert intake.shown("a\nb<script>") == repr("a\nb<script>")
    assert len(intake.shown("x" * 500)) == 80 and intake.shown("=cmd|' /C calc'!A0")[0] in "'\""  # no spreadsheet formula


def test_collect_copies_plain_files_only_and_names_what_it_left(folder, tmp_path, takes):
    (folder / "shadow").symlink_to("/etc/shadow")
    (folder / "etc").symlink_to("/etc")
    os.mkfifo(folder / "pipe")
    _sparse(folder / "data" / "later.txt", (LIMITS.submission_file_mb + 1) * 2**20)  # one of the assignment's, too big
    (folder / ".ipynb_checkpoints").mkdir()
    dest = tmp_path / "collected"
    reason = intake.copy(folder, dest, LIMITS, takes, ignore=[".ipynb_checkpoints"]).reason
    assert reason.startswith("nbgrader collect refused this submission")
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        intake.REFUSED, "05_self_attention.ipynb", "data", "data/notes.txt"]
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert intake.problem(dest, LIMITS).startswith("nbgrader collect refused this submission")


def test_collect_takes_only_the_students_own_files(folder, tmp_path, takes):
    # a hard link to a file someone else owns is a plain file, but not the student's
    other = tmp_path / "instructors_file"
    other.write_text("secret")
    os.chown(other, 65534, 65534)
    os.link(other, folder / "data" / "later.txt")
    dest = tmp_path / "collected"
    assert "'data/later.txt' is not the student's own file" in intake.copy(folder, dest, LIMITS, takes).reason
    assert not (dest / "data" / "later.txt").exists()


def test_a_clean_submission_is_collected_whole(folder, tmp_path, takes):
    dest = tmp_path / "collected"
    copied = intake.copy(folder, dest, LIMITS, takes)
    assert copied.reason == copied.left_out == "" and not (dest / intake.LEFT_OUT).exists()
    assert (dest / "data" / "notes.txt").read_text() == "mine" and intake.problem(dest, LIMITS) == ""


def test_a_folder_of_someone_elses_is_not_entered(folder, tmp_path, takes):
    os.chown(folder / "data", 65534, 65534)
    dest = tmp_path / "collected"
    assert "'data' is not the student's own folder" in intake.copy(folder, dest, LIMITS, takes).reason
    assert not (dest / "data").exists()


def test_names_that_are_not_utf8_are_looked_at_copied_and_shown(folder, source, tmp_path):
    name = b"notes\xff.txt"
    for top in (folder, source):  # the assignment's own data file, by a name in bytes
        with open(os.path.join(os.fsencode(top), b"data", name), "wb") as fh:
            fh.write(b"mine too")
    assert intake.problem(os.fsencode(folder), LIMITS) == intake.problem(folder, LIMITS) == ""
    dest = tmp_path / "collected"
    copied = intake.copy(folder, dest, LIMITS, intake.declared(source))
    assert copied.reason == "" and open(os.path.join(os.fsencode(dest), b"data", name), "rb").read() == b"mine too"
    os.mkfifo(os.path.join(os.fsencode(folder), b"data", b"pipe\xfe"))
    assert intake.problem(folder, LIMITS) == "'data/pipe\\udcfe' is a pipe: a submission holds plain files only"


def test_the_time_copied_is_the_file_systems_and_cannot_be_set_back(folder, tmp_path, takes):
    import time

    os.utime(folder / "data" / "notes.txt", (0, 0))  # the owner may date a file's mtime to 1970, not its ctime
    before = time.time_ns()
    (folder / "data" / "later.txt").write_text("written now")
    copied = intake.copy(folder, tmp_path / "collected", LIMITS, takes)
    assert before <= copied.changed_ns <= time.time_ns()
    assert (tmp_path / "collected" / "data" / "notes.txt").stat().st_mtime == 0  # the copy keeps the mtime it was given


def test_small_files_are_read_without_following(folder):
    (folder / "timestamp.txt").write_text("2026-11-27 12:00:00")
    (folder / "secret.txt").symlink_to("/etc/passwd")
    os.mkfifo(folder / "pipe.txt")
    assert intake.read_small(folder / "timestamp.txt") == b"2026-11-27 12:00:00"
    assert intake.read_small(folder / "secret.txt") is None and intake.read_small(folder / "pipe.txt") is None


# ---------------------------------------------------------------- a submission is data: only what the assignment declares

def plant_code(folder):
    """What a student may put beside her notebook for the instructor's Python to run: a kernel's launcher, a module
    a notebook imports, site's own hook, a package, a .pth, an extension, a folder of her own, and code in a data folder."""
    for name in ("ipykernel_launcher.py", "torch.py", "sitecustomize.py", "evil.pth", "numpy.cpython-311-x86_64-linux-gnu.so",
                 "pkg/__init__.py", "pkg/data.txt", "mine/notes.txt", "data/helper.py", "data/__pycache__/helper.cpython-311.pyc"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("open('/tmp/seqcourse-planted-code-ran', 'w')")


PLANTED = ["'data/__pycache__'", "'data/helper.py'", "'evil.pth'", "'ipykernel_launcher.py'", "'mine'",
           "'numpy.cpython-311-x86_64-linux-gnu.so'", "'pkg'", "'sitecustomize.py'", "'torch.py'"]


def test_an_assignment_declares_its_data_files_never_code(takes):
    assert takes.files == {"05_self_attention.ipynb", "data/notes.txt", "data/later.txt"} and takes.folders == {"data"}
    assert takes.takes("data", folder=True) and not takes.takes("pkg", folder=True) and not takes.takes("data/helper.py")
    assert all(takes.takes(n) for n in ("scratch.ipynb", "timestamp.txt", "submission_secret.txt"))  # at its top
    assert not takes.takes("data/scratch.ipynb") and not takes.takes("torch.py")


def test_collect_leaves_code_beside_the_notebook_out_and_names_it(folder, tmp_path, takes):
    plant_code(folder)
    (folder / "scratch.ipynb").write_text("{}")
    dest = tmp_path / "collected"
    copied = intake.copy(folder, dest, LIMITS, takes)
    assert copied.reason == "" and all(name in copied.left_out for name in PLANTED), copied.left_out
    assert copied.left_out.startswith("nbgrader collect left out as no part of the assignment")
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        intake.LEFT_OUT, "05_self_attention.ipynb", "data", "data/notes.txt", "scratch.ipynb"]
    # graded as ever (the note refuses nothing), and what `grade` reports is Collect's note
    assert intake.problem(dest, LIMITS) == "" and intake.left_out(dest, takes, LIMITS) == copied.left_out


def test_a_folder_filled_by_hand_names_what_grading_leaves_out(folder, takes):
    plant_code(folder)
    assert intake.problem(folder, LIMITS) == ""
    why = intake.left_out(folder, takes, LIMITS, ignore=[".ipynb_checkpoints"])
    assert why.startswith("left out as no part of the assignment") and all(name in why for name in PLANTED)
    assert "pkg/" not in why and "mine/" not in why  # a folder left out is named once
