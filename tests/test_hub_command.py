"""`make hub`'s command line and choices that need no hub (tests/grading/test_hub.py runs the hub itself)."""
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder.hub import __main__ as hub
from autograder.hub import cgroups, classroom, disks, wall


@pytest.mark.parametrize("argv, says", [(["--students", "0"], "--students must be between 1 and 500"),
                                        (["--cpu", "0"], "--cpu must be above 0"),
                                        (["--cpu", str(os.cpu_count() + 1)], "--cpu must be above 0"),
                                        (["--students", "x"], "invalid int value"),
                                        (["--pids", "10"], "--pids must be between 64"),
                                        (["--disk", "lots"], "'LOTS' is not a size"),
                                        (["--disk", "1M"], "--disk must be at least 32M"),
                                        (["--mem", "0"], "is not a size above zero")])
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
    assert table[0] == "JupyterHub for the class: http://localhost:8123/" and "trial login" in table[1]
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


def test_on_cgroup_v2_a_student_s_server_gets_cpu_max_memory_max_and_pids_max(tmp_path):
    root = v2_tree(tmp_path, delegated="cpu memory pids")
    assert cgroups.unified(root)
    groups, held = cgroups.v2_group(cgroups.wanted(1.5, 3 << 30, 300), root)
    assert held == {"cpu", "memory", "pids", "freezer"} and len(groups) == 1
    group = tmp_path / os.path.basename(groups[0])
    assert (group / "cpu.max").read_text() == "150000 100000" and (group / "memory.max").read_text() == str(3 << 30)
    assert (group / "pids.max").read_text() == "300"
    # and the course, inside it, reads 1.5 CPUs as one thread's worth: floor(quota / period)
    from course_lib.runtime import _v2
    assert _v2(group) == 1.5


def test_on_cgroup_v2_a_controller_the_hierarchy_does_not_delegate_is_not_claimed(tmp_path, monkeypatch):
    root = v2_tree(tmp_path, delegated="cpu")
    real_write = type(root).write_text

    def refuse(path, text, *a, **k):  # the kernel refuses +memory where processes sit in a container's root
        if path.name == "cgroup.subtree_control":
            raise OSError(16, "Device or resource busy")
        return real_write(path, text, *a, **k)
    monkeypatch.setattr(type(root), "write_text", refuse)
    groups, held = cgroups.v2_group({"memory": {"memory.limit_in_bytes": 1 << 30}}, root)
    assert held == set() and not (tmp_path / os.path.basename(groups[0]) / "memory.max").exists()


def test_version_1_limits_name_every_controller_a_student_s_server_joins():
    assert cgroups.wanted(1, 2 << 30, 512) == {"freezer": {}, "cpu": {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": 100_000},
                                               "memory": {"memory.limit_in_bytes": 2 << 30, cgroups.TCP_MEMORY: 2 << 28},
                                               "pids": {"pids.max": 512}}


@pytest.mark.parametrize("text, size", [("2G", 2 << 30), ("512M", 512 << 20), ("1.5G", 3 << 29), ("1048576", 1 << 20),
                                        ("64mb", 64 << 20)])
def test_sizes_read_as_jupyterhub_reads_mem_limit(text, size):
    assert disks.parse_size(text) == size and disks.parse_size(disks.shown(size)) == size


@pytest.fixture
def open_folder():
    """A folder every account may pass through, as /tmp/x is (pytest's own tmp_path is its user's alone)."""
    folder = Path(tempfile.mkdtemp())
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder)


def course_like(folder):
    """A checkout of the files the check looks at, as git writes them with umask 022: readable by all."""
    for name in ("solutions_lib/__init__.py", "autograder/assignments/__init__.py", "solutions/05/05.ipynb"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return folder


def test_a_checkout_is_exposed_when_every_folder_above_a_secret_lets_others_pass(open_folder):
    open_one = course_like(open_folder / "open")
    assert classroom.readable_by_others(open_one, classroom.SECRETS).endswith("solutions_lib/__init__.py")
    os.chmod(open_one, 0o700)  # the checkout's own folder closed: nothing below it can be reached
    assert classroom.readable_by_others(open_one, classroom.SECRETS) == ""
    os.chmod(open_one, 0o755)
    for path in open_one.rglob("*"):
        os.chmod(path, 0o700 if path.is_dir() else 0o600)
    assert classroom.readable_by_others(open_one, classroom.SECRETS) == ""


def test_make_hub_refuses_a_checkout_others_can_read_before_it_makes_anything(open_folder, monkeypatch):
    repo = course_like(open_folder / "checkout")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(classroom.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(classroom, "_roster", lambda *a: pytest.fail("the class was being made"))
    with pytest.raises(classroom.ClassError, match=r"other accounts on this machine can read .*solutions_lib/__init__.py"
                                                   r".*chmod -R go-rwx " + str(repo)):
        classroom.prepare(open_folder / "state", repo=repo)
    assert not (open_folder / "state").exists()


def test_a_student_s_wall_shows_her_home_and_inbound_writable_and_the_class_s_state_not_at_all(tmp_path):
    me = os.environ.get("USER") or __import__("pwd").getpwuid(os.getuid()).pw_name
    room = classroom.Classroom(tmp_path, "t-teacher", [me], {})
    argv = wall.argv(room, me, [], 2 << 30)
    assert argv[0] == "bwrap" and argv[-1] == "--" and "--unshare-pid" in argv and "--die-with-parent" in argv
    binds = {(argv[i], argv[i + 1], argv[i + 2]) for i in range(len(argv) - 2) if argv[i] in ("--bind", "--ro-bind")}
    writable = {(src, dest) for kind, src, dest in binds if kind == "--bind"}
    home = __import__("pwd").getpwnam(me).pw_dir
    assert writable == {(str(room.volumes.home(me)), home),
                        (str(room.volumes.inbound(me)), str(room.exchange / classroom.COURSE / "inbound"))}
    shown = {dest for _, _, dest in binds}
    assert not any(str(tmp_path / name) in shown for name in ("hub", "disks", "volumes", "run", "envs/instructor"))
    assert str(room.exchange / classroom.COURSE / "outbound") in shown and str(room.env("student")) in shown
    sizes = {argv[i + 3]: int(argv[i + 1]) for i in range(len(argv) - 3) if argv[i] == "--size" and argv[i + 2] == "--tmpfs"}
    assert sizes == {"/tmp": 512 << 20, "/var/tmp": 512 << 20, "/dev/shm": 512 << 20, str(room.exchange): wall.EXCHANGE_TMPFS}


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("bwrap"), reason="starting a server as another account needs root")
def test_make_hub_finds_out_before_the_class_starts_whether_a_student_s_server_can_be_walled(monkeypatch):
    nobody = __import__("pwd").getpwuid(65534).pw_name
    assert wall.problem(nobody) == ""  # this machine can: CI's and a class's
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "bubblewrap could not start as" in wall.problem(nobody)


def test_what_runs_the_class_s_proxy_is_ended_and_nothing_else(tmp_path):
    script = tmp_path / "configurable-http-proxy"
    script.write_text("import time\ntime.sleep(600)\n")
    proxy = subprocess.Popen([sys.executable, str(script)])
    other = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(600)  # {script}"])
    try:
        for _ in range(100):  # until the interpreter has its command line
            if str(script).encode() in Path(f"/proc/{proxy.pid}/cmdline").read_bytes():
                break
            time.sleep(0.05)
        assert classroom.end_running(script) == [str(proxy.pid)]
        assert proxy.wait(timeout=60) == -signal.SIGKILL and other.poll() is None
    finally:
        other.kill()
        other.wait()
