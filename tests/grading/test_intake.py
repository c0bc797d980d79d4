"""Files in (autograder.grading.intake): a submission folder is looked at without following anything,
and refused for a link, a special file or a size over the limits; collect copies without following."""
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


def test_collect_copies_plain_files_only_and_names_what_it_left(folder, tmp_path):
    (folder / "shadow").symlink_to("/etc/shadow")
    (folder / "etc").symlink_to("/etc")
    os.mkfifo(folder / "pipe")
    _sparse(folder / "big.bin", (LIMITS.submission_file_mb + 1) * 2**20)
    (folder / ".ipynb_checkpoints").mkdir()
    dest = tmp_path / "collected"
    reason = intake.copy(folder, dest, LIMITS, ignore=[".ipynb_checkpoints"]).reason
    assert reason.startswith("nbgrader collect refused this submission")
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        intake.REFUSED, "05_self_attention.ipynb", "data", "data/notes.txt"]
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert intake.problem(dest, LIMITS).startswith("nbgrader collect refused this submission")


def test_collect_takes_only_the_students_own_files(folder, tmp_path):
    # a hard link to a file someone else owns is a plain file, but not the student's
    other = tmp_path / "instructors_file"
    other.write_text("secret")
    os.chown(other, 65534, 65534)
    os.link(other, folder / "borrowed.txt")
    dest = tmp_path / "collected"
    assert "'borrowed.txt' is not the student's own file" in intake.copy(folder, dest, LIMITS).reason
    assert not (dest / "borrowed.txt").exists()


def test_a_clean_submission_is_collected_whole(folder, tmp_path):
    dest = tmp_path / "collected"
    assert intake.copy(folder, dest, LIMITS).reason == ""
    assert (dest / "data" / "notes.txt").read_text() == "mine" and intake.problem(dest, LIMITS) == ""


def test_a_folder_of_someone_elses_is_not_entered(folder, tmp_path):
    os.chown(folder / "data", 65534, 65534)
    dest = tmp_path / "collected"
    assert "'data' is not the student's own folder" in intake.copy(folder, dest, LIMITS).reason
    assert not (dest / "data").exists()


def test_names_that_are_not_utf8_are_looked_at_copied_and_shown(folder, tmp_path):
    name = b"notes\xff.txt"
    with open(os.path.join(os.fsencode(folder), b"data", name), "wb") as fh:
        fh.write(b"mine too")
    assert intake.problem(os.fsencode(folder), LIMITS) == intake.problem(folder, LIMITS) == ""
    dest = tmp_path / "collected"
    copied = intake.copy(folder, dest, LIMITS)
    assert copied.reason == "" and open(os.path.join(os.fsencode(dest), b"data", name), "rb").read() == b"mine too"
    os.mkfifo(os.path.join(os.fsencode(folder), b"data", b"pipe\xfe"))
    assert intake.problem(folder, LIMITS) == "'data/pipe\\udcfe' is a pipe: a submission holds plain files only"


def test_the_time_copied_is_the_file_systems_and_cannot_be_set_back(folder, tmp_path):
    import time

    os.utime(folder / "data" / "notes.txt", (0, 0))  # the owner may date a file's mtime to 1970, not its ctime
    before = time.time_ns()
    (folder / "data" / "later.txt").write_text("written now")
    copied = intake.copy(folder, tmp_path / "collected", LIMITS)
    assert before <= copied.changed_ns <= time.time_ns()
    assert (tmp_path / "collected" / "data" / "notes.txt").stat().st_mtime == 0  # the copy keeps the mtime it was given


def test_small_files_are_read_without_following(folder):
    (folder / "timestamp.txt").write_text("2026-11-27 12:00:00")
    (folder / "secret.txt").symlink_to("/etc/passwd")
    os.mkfifo(folder / "pipe.txt")
    assert intake.read_small(folder / "timestamp.txt") == b"2026-11-27 12:00:00"
    assert intake.read_small(folder / "secret.txt") is None and intake.read_small(folder / "pipe.txt") is None
