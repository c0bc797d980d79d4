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


def v2_tree(tmp_path, delegated="cpu memory"):
    """A cgroup version 2 hierarchy as the kernel shows it, in a folder: its controllers and what it delegates."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text(delegated + "\n")
    return tmp_path


def test_on_cgroup_v2_a_student_s_server_gets_cpu_max_and_memory_max(tmp_path):
    from autograder.hub.spawner import unified, v2_group

    root = v2_tree(tmp_path)
    assert unified(root)
    wanted = {"cpu": {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": 150_000}, "memory": {"memory.limit_in_bytes": 3 << 30}}
    groups, held = v2_group(wanted, root)
    assert held == {"cpu", "memory"} and len(groups) == 1
    group = tmp_path / os.path.basename(groups[0])
    assert (group / "cpu.max").read_text() == "150000 100000" and (group / "memory.max").read_text() == str(3 << 30)
    # and the course, inside it, reads 1.5 CPUs as one thread's worth: floor(quota / period)
    from course_lib.runtime import _v2
    assert _v2(group) == 1.5


def test_on_cgroup_v2_a_controller_the_hierarchy_does_not_delegate_is_not_claimed(tmp_path, monkeypatch):
    from autograder.hub import spawner

    root = v2_tree(tmp_path, delegated="cpu")
    real_write = type(root).write_text

    def refuse(path, text, *a, **k):  # the kernel refuses +memory where processes sit in a container's root
        if path.name == "cgroup.subtree_control":
            raise OSError(16, "Device or resource busy")
        return real_write(path, text, *a, **k)
    monkeypatch.setattr(type(root), "write_text", refuse)
    groups, held = spawner.v2_group({"memory": {"memory.limit_in_bytes": 1 << 30}}, root)
    assert held == set() and not (tmp_path / os.path.basename(groups[0]) / "memory.max").exists()
