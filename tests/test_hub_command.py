"""`make hub`'s command line and choices that need no hub (tests/grading/test_hub.py runs the hub itself)."""
import os
import stat

import pytest

from autograder.hub import __main__ as hub
from autograder.hub import classroom


@pytest.mark.parametrize("argv, says", [(["--students", "0"], "--students must be between 1 and 500"),
                                        (["--cpu", "0"], "--cpu must be above 0"),
                                        (["--cpu", str(os.cpu_count() + 1)], "--cpu must be above 0"),
                                        (["--students", "x"], "invalid int value")])
def test_a_wrong_argument_is_named(argv, says, capsys):
    with pytest.raises(SystemExit):
        hub.parse(argv)
    assert says in capsys.readouterr().err


def test_without_root_it_says_how_to_run_it(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(classroom.ClassError, match=r"run it as root \(sudo make hub\)"):
        classroom.prepare(tmp_path / "state")
    assert not (tmp_path / "state").exists()  # nothing made


@pytest.mark.parametrize("name, ok", [("seq-student1", True), ("h123-teacher", True), ("Seq-x", False), ("1abc", False),
                                      ("a" * 33, False), ("a b", False), ("a/../b", False), ("é", False)])
def test_an_account_name_is_a_plain_unix_name(name, ok):
    assert classroom._valid_name(name) is ok


def test_a_prefix_that_makes_no_account_name_is_refused_before_any_account(tmp_path):
    (tmp_path / "hub").mkdir()
    with pytest.raises(classroom.ClassError, match="--prefix of lowercase letters"):
        classroom._roster(tmp_path, 2, "Bad Prefix/", "/home")


def test_the_logins_name_every_account_and_its_role(tmp_path):
    room = classroom.Classroom(tmp_path, "t-teacher", ["t-student1", "t-student2"],
                               {"t-teacher": "pw0", "t-student1": "pw1", "t-student2": "pw2"})
    table = hub.logins(room, 8123).splitlines()
    assert table[0] == "JupyterHub for the class: http://127.0.0.1:8123/" and "trial login" in table[1]
    rows = [line.split() for line in table[3:]]
    assert rows == [["t-teacher", "pw0", "instructor"], ["t-student1", "pw1", "student"], ["t-student2", "pw2", "student"]]


def test_the_passwords_are_root_s_alone_and_kept_between_starts(tmp_path):
    (tmp_path / "hub").mkdir()
    first = classroom._roster(tmp_path, 2, "t-", "/home")
    assert stat.S_IMODE((tmp_path / "hub" / "class.json").stat().st_mode) == 0o600
    again = classroom._roster(tmp_path, 3, "t-", "/home")  # one more student; the others keep theirs
    assert again.students == ["t-student1", "t-student2", "t-student3"]
    assert all(again.passwords[u] == first.passwords[u] for u in first.users)
    assert len(set(again.passwords.values())) == 4
