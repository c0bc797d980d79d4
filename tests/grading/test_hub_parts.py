"""Parts of `make hub` tested without a class: the front door (autograder/hub/proxy.py) and taking a class down
(`make hub-remove`, classroom.remove).

The front door: who listens on a port, read from /proc against real sockets (another account's listener is named,
the proxy's own passes); and a real JupyterHub with CheckedProxy and the real configurable-http-proxy (from npm, as
`make hub` installs it), which stops, naming the holder, when someone else holds its port before it starts, as its
proxy starts, or while its proxy is down and JupyterHub restarts it; while it runs, no other account can listen on
[::1] at its port, where browsers try localhost first.

The removal: a class of real accounts and disks (no environments), taken down by the real command; a disk in use is
kept and named, and the next run finishes; refused while the class's hub runs.
"""
import errno
import os
import pwd
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from autograder.hub import __main__ as make_hub
from autograder.hub import classroom, disks, proxy, wall
from conftest import ROOT

# the holder of a port in these tests: another account's process (nobody's) where this one may start one, as root;
# else another process of this account's
OTHER = 65534 if os.geteuid() == 0 and shutil.which("setpriv") else os.getuid()
AS_OTHER = ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups"] if OTHER != os.getuid() else []
TAKE = """
import socket, sys, time
family, address, port = (socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET), sys.argv[1], int(sys.argv[2])
s = socket.socket(family)
while True:  # as a student would: again and again until the port is free
    try:
        s.bind((address, port))
        break
    except OSError:
        time.sleep(0.001)
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(600)
"""


def take(port, address="127.0.0.1"):
    """Another's process, listening on address:port once it is free (port 0: any); returns it and its port."""
    thief = subprocess.Popen([*AS_OTHER, classroom.shared_python(), "-c", TAKE, address, str(port)],
                             stdout=subprocess.PIPE, text=True)
    return thief, int(line_of(thief))


def held_by(thief, port):
    """How the front door names the other's listener."""
    return f"{pwd.getpwuid(OTHER).pw_name} (uid {OTHER}, pid {thief}) listening on 127.0.0.1:{port}"


def line_of(process, wait=120):
    ready, _, _ = select.select([process.stdout], [], [], wait)
    assert ready, "the process printed nothing"
    return process.stdout.readline()


def end(process):
    if process.poll() is None:
        process.kill()
    process.wait()


def test_another_account_s_listener_is_named_with_its_pid_and_fails_the_check():
    thief, port = take(0)
    try:
        held = proxy.listeners(port)
        assert [(h.address, h.port, h.uid, h.pids) for h in held] == [("127.0.0.1", port, OTHER, (thief.pid,))]
        assert str(held[0]) == held_by(thief.pid, port)
        assert proxy.door([port], os.getpid()) == (held, [port])  # not this process's: another's, and none of its own
        assert proxy.door([port]) == (held, [])
    finally:
        end(thief)


def v6_loopback():
    guard = proxy.hold_v6_loopback(0)
    return guard is not None and guard.close() is None


@pytest.mark.skipif(not v6_loopback(), reason="this machine has no IPv6 loopback")
def test_a_listener_on_v6_loopback_counts_where_localhost_leads():
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        port = mine.getsockname()[1]
        thief, _ = take(port, "::1")
        try:
            others, missing = proxy.door([port], os.getpid())
            assert [(o.address, o.pids) for o in others] == [("::1", (thief.pid,))] and missing == []
        finally:
            end(thief)


def test_the_proxy_s_own_listener_passes_and_none_is_missing():
    with socket.socket() as mine, socket.socket() as elsewhere:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        elsewhere.bind(("127.0.0.1", 0))  # bound, not listening: no listener
        port, quiet = mine.getsockname()[1], elsewhere.getsockname()[1]
        assert proxy.door([port], os.getpid()) == ([], [])
        assert proxy.door([quiet], os.getpid()) == ([], [quiet])
        assert proxy.door([quiet]) == ([], [])



def test_ports_chosen_together_are_distinct_and_avoid_those_named():
    # one at a time, the kernel may hand out a port again once it is closed: a hub's proxy once got the same port
    # for its public side and its API, and could not listen on the second (EADDRINUSE)
    first = proxy.free_ports(100)
    again = proxy.free_ports(100, besides=set(first))
    assert len(set(first)) == len(set(again)) == 100 and not set(first) & set(again)

# A hub of its own: JupyterHub with CheckedProxy, as autograder/hub/jupyterhub_config.py sets it, and nothing else.
CONFIG = """
from autograder.hub.proxy import CheckedProxy
c = get_config()  # noqa: F821
c.JupyterHub.proxy_class = CheckedProxy
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = {command!r}
c.ConfigurableHTTPProxy.pid_file = "{top}/proxy.pid"
c.ConfigurableHTTPProxy.check_running_interval = 1
c.JupyterHub.pid_file = "{top}/jupyterhub.pid"
c.JupyterHub.db_url = "sqlite:///{top}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{top}/cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
"""
# a proxy command that lets another take the public port (--port's) just before it starts the real proxy
FIRST_TAKEN = """
import os, subprocess, sys
argv = sys.argv[2:]
thief = subprocess.Popen({as_other!r} + [{python!r}, "-c", {take!r}, "127.0.0.1", argv[argv.index("--port") + 1]],
                         stdout=subprocess.PIPE)
thief.stdout.readline()
open({pid_file!r}, "w").write(str(thief.pid))
os.execv(sys.argv[1], sys.argv[1:])
"""


@pytest.fixture(scope="module")
def chp(tmp_path_factory):
    """configurable-http-proxy, installed from npm as `make hub` installs it."""
    if not shutil.which("npm"):
        pytest.skip("the hub's proxy comes from the npm registry: npm is not installed")
    folder = tmp_path_factory.mktemp("proxy")
    done = subprocess.run(["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--loglevel=error",
                           classroom.PROXY], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"npm could not install {classroom.PROXY}: {done.stderr[-500:]}")
    return str(folder / "node_modules" / ".bin" / "configurable-http-proxy")


class Hub:
    """`jupyterhub` with CheckedProxy on `port` (a free one by default), its files in `top`, its log in top/hub.log."""

    def __init__(self, top, command, port=None):
        self.port = port or proxy.free_ports(1)[0]
        self.top, (self.api_port, hub_port) = top, proxy.free_ports(2, besides={self.port})
        (top / "jupyterhub_config.py").write_text(CONFIG.format(port=self.port, hub_port=hub_port, top=top,
                                                                api_port=self.api_port, command=command))
        with open(top / "hub.log", "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(top / "jupyterhub_config.py")],
                                         cwd=top, stdout=log, stderr=subprocess.STDOUT)

    def up(self):
        """True once its login page answers through the proxy; False if it stopped first."""
        deadline = time.monotonic() + 120
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/hub/login", timeout=5).status_code == 200:
                    return True
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        return False

    def end(self):
        """Its exit status once it has stopped by itself, or after SIGTERM (in two minutes), or SIGKILL."""
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig:
                self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout=120 if sig is None else 60)
            except subprocess.TimeoutExpired:
                continue
        return self.proc.wait()

    @property
    def refusal(self):
        path = proxy.refusal(self.top / "proxy.pid")
        return path.read_text() if path.exists() else ""

    @property
    def log(self):
        return (self.top / "hub.log").read_text()


def free_soon(port):
    """True once no one listens on `port` (a stopped proxy closes its sockets as it exits)."""
    deadline = time.monotonic() + 60
    while proxy.listeners(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not proxy.listeners(port)


@pytest.mark.slow
def test_a_hub_whose_port_is_taken_does_not_start_and_names_the_holder(chp, tmp_path):
    thief, port = take(0)
    try:
        hub = Hub(tmp_path, [chp], port)
        assert hub.end() == 1
        assert f"the hub's port is already taken: {held_by(thief.pid, port)}. Stop that process" in hub.refusal
        assert hub.refusal.strip() in hub.log
        assert free_soon(hub.api_port)  # no proxy was left
    finally:
        end(thief)


@pytest.mark.slow
def test_a_port_taken_as_the_proxy_starts_stops_the_hub_before_any_login(chp, tmp_path):
    # the restarted proxy of the attack: someone took the public port first, and it comes up with its API port alone
    thief_pid = tmp_path / "thief.pid"
    (tmp_path / "proxy_after_a_thief.py").write_text(FIRST_TAKEN.format(
        as_other=AS_OTHER, python=classroom.shared_python(), take=TAKE, pid_file=str(thief_pid)))
    hub = Hub(tmp_path, [sys.executable, str(tmp_path / "proxy_after_a_thief.py"), chp])
    try:
        assert hub.end() == 1
        thief = int(thief_pid.read_text())
        assert re.search(rf"the hub's proxy \(pid \d+\) started, but {re.escape(held_by(thief, hub.port))}, not the "
                         r"proxy\. The hub stops", hub.refusal), hub.log
        assert free_soon(hub.api_port)  # the proxy stopped with the hub
    finally:
        if thief_pid.exists():
            os.kill(int(thief_pid.read_text()), signal.SIGKILL)


@pytest.mark.slow
def test_make_hub_says_why_its_hub_stopped_and_exits_1(chp, tmp_path, monkeypatch):
    thief, port = take(0)
    room = classroom.Classroom(tmp_path, "t-teacher", ["t-student1"], {"t-teacher": "pw0", "t-student1": "pw1"})
    room.hub_dir.mkdir()
    config = tmp_path / "jupyterhub_config.py"  # the proxy's pid file where the class's configuration puts it
    hub_port, api_port = proxy.free_ports(2, besides={port})
    config.write_text(CONFIG.format(port=port, hub_port=hub_port, api_port=api_port, command=[chp],
                                    top=room.proxy_pid_file.parent))
    monkeypatch.setattr(make_hub, "CONFIG", config)
    monkeypatch.setattr(classroom, "prepare", lambda *_, **__: room)  # the class made; its hub is what is tested
    monkeypatch.setattr(wall, "problem", lambda _: "")
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # pytest's own handlers stay
    try:
        with pytest.raises(SystemExit) as stopped:
            make_hub.main(["--port", str(port), "--state", str(tmp_path)])
    finally:
        end(thief)
    assert stopped.value.code == (f"make hub: the hub's port is already taken: {held_by(thief.pid, port)}. Stop that "
                                  "process, or give make hub another --port. The hub stops, so that no login goes to "
                                  "anyone else's listener")


# as another account, try to listen on the hub's port at [::1] and [::], plainly and sharing as far as Linux lets
TRY_V6 = """
import socket, sys
for address in ("::1", "::"):
    for options in ((), (socket.SO_REUSEADDR, socket.SO_REUSEPORT)):
        s = socket.socket(socket.AF_INET6)
        for option in options:
            s.setsockopt(socket.SOL_SOCKET, option, 1)
        try:
            s.bind((address, int(sys.argv[1])))
            s.listen()
            print("took")
        except OSError:
            print("refused")
        s.close()
"""


@pytest.mark.slow
def test_a_port_taken_while_the_proxy_is_down_stops_the_hub(chp, tmp_path):
    hub, thief = Hub(tmp_path, [chp]), None
    try:
        assert hub.up(), hub.log
        tried = subprocess.run([*AS_OTHER, classroom.shared_python(), "-c", TRY_V6, str(hub.port)],
                               capture_output=True, text=True)
        assert tried.stdout.split() == ["refused"] * 4, tried  # where browsers try localhost first
        os.kill(hub.proc.pid, signal.SIGSTOP)  # so that the thief is first, as she would be, looping on bind()
        os.kill(int((tmp_path / "proxy.pid").read_text()), signal.SIGKILL)
        thief, _ = take(hub.port)
        os.kill(hub.proc.pid, signal.SIGCONT)
        assert hub.end() == 1
        assert "Proxy stopped with exit code" in hub.log  # JupyterHub found it dead and started another
        assert f"before it could start again its port was taken: {held_by(thief.pid, hub.port)}" in hub.refusal
        assert not (tmp_path / "jupyterhub.pid").exists()  # stopped as SIGTERM stops it: its cleanup ran
        assert free_soon(hub.api_port)
    finally:
        if hub.proc.poll() is None:
            os.kill(hub.proc.pid, signal.SIGCONT)
            hub.end()
        if thief:
            end(thief)


def why_no_class():
    """'' where a class's accounts and disks can be made here, else why not."""
    if os.geteuid() != 0:
        return "a class's accounts and disks need root"
    if not shutil.which("useradd") or not shutil.which("setpriv"):
        return "useradd and setpriv are needed (Debian: passwd, util-linux)"
    return disks.can_limit()


CLASS_ONLY = pytest.mark.skipif(bool(why_no_class()), reason=why_no_class() or "-")
DISK = 32 * 2**20


def quiet(*_):
    pass


@pytest.fixture
def tiny_class():
    """make(students): a class of real accounts and disks, as classroom.prepare makes them, without environments;
    whatever a test leaves of it is removed afterwards."""
    top = Path(tempfile.mkdtemp())
    os.chmod(top, 0o755)  # the homes are made below it: every account must pass through
    made = []

    def make(students):
        prefix = f"r{os.getpid() % 10**6}x{len(made)}-"
        room = classroom.Classroom(top / f"state{len(made)}", f"{prefix}teacher",
                                   [f"{prefix}student{i}" for i in range(1, students + 1)], {}, str(top / "home"),
                                   disk=DISK)
        made.append(room)
        room.hub_dir.mkdir(parents=True)
        room.save()
        for user in room.users:
            classroom._account(user, room.home_base, quiet)
        teacher = pwd.getpwnam(room.instructor)
        assert room.volumes.prepare(room.students, DISK, room.home, (teacher.pw_uid, teacher.pw_gid), quiet) == ""
        return room

    yield make
    for room in made:
        if (room.hub_dir / "class.json").exists():
            room.hub_pid_file.unlink(missing_ok=True)
            classroom.remove(room, say=quiet)
    shutil.rmtree(top, ignore_errors=True)


def run_remove(state):
    return subprocess.run([sys.executable, "-m", "autograder.hub", "--remove", "--state", str(state)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def as_user(name):
    pw = pwd.getpwnam(name)
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups"]


def backing_files():
    """The file behind each loop device attached on this machine."""
    return subprocess.run(["losetup", "--list", "--noheadings", "--output", "BACK-FILE"], capture_output=True,
                          text=True).stdout.split("\n")


@CLASS_ONLY
@pytest.mark.slow
def test_make_hub_remove_takes_the_class_down_and_says_what_it_removed(tiny_class):
    room = tiny_class(2)
    top, first = room.state.parent, room.students[0]
    terminals = room.state / "pts" / first  # as autograder/hub/wall.py mounts her terminals' devpts
    terminals.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(terminals)], check=True)
    homes = {user: room.home(user) for user in room.users}
    assert all(disks.mounted(homes[s]) and disks.loop_devices(room.volumes.image(s)) for s in room.students)
    hers = subprocess.Popen([*as_user(first), "sleep", "600"])  # left running by her
    done = run_remove(room.state)
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout.splitlines()
    for student in room.students:
        assert f"unmounted {homes[student]}" in said and f"unmounted {room.volumes.volume(student)}" in said
    assert f"unmounted {terminals}" in said
    assert [line for line in said if "Unix account" in line] == [f"removed the Unix account {user} and its home"
                                                                for user in room.users]
    assert said[-1] == f"removed {room.state}" and done.stderr == ""
    assert hers.wait() == -signal.SIGKILL
    for user in room.users:
        with pytest.raises(KeyError):
            pwd.getpwnam(user)
        assert not homes[user].exists()
    assert not room.state.exists()
    assert [p for p in disks.mount_points() if p.startswith(f"{top}/")] == []
    assert [f for f in backing_files() if f.startswith(f"{top}/")] == []  # every loop device detached


@CLASS_ONLY
@pytest.mark.slow
def test_a_disk_in_use_is_kept_and_named_and_the_next_removal_finishes(tiny_class):
    room = tiny_class(1)
    student, top = room.students[0], room.state.parent
    home, image = room.home(student), room.volumes.image(student)
    rooted = subprocess.Popen(["sleep", "600"], cwd=home)  # root's, in her home: no removal ends it
    # mount namespaces made while her disk is mounted (a container, `unshare -m`) hold copies of its mounts, which an
    # unmount here does not reach: one with its process in her home, then one unused (met after the busy one, it is
    # unmounted all the same)
    copy = ["unshare", "--mount", "--propagation", "private", "sleep", "600"]
    busy = subprocess.Popen(copy, cwd=home)
    idle = subprocess.Popen(copy, cwd="/")
    try:
        done = run_remove(room.state)
        end(rooted)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"make hub-remove: could not remove {student}'s disk: {home} is still mounted" in done.stderr
        assert f"`fuser -vm {home}` names the processes using it" in done.stderr
        assert f"make hub-remove: could not remove the account {student}, kept with her disk" in done.stderr
        assert f"make hub-remove: could not remove {room.state}, kept until all of the above is removed" in done.stderr
        assert f"removed the Unix account {room.instructor} and its home" in done.stdout
        assert disks.mounted(home) and disks.mounted(room.volumes.volume(student)) and pwd.getpwnam(student)
        assert disks.loop_devices(image)  # her image kept, mounted, with her files
        again = run_remove(room.state)
        assert again.returncode == 1, again.stdout + again.stderr
        assert f"unmounted {home}\n" in again.stdout
        assert f"unmounted {home} in the mount namespace of process {idle.pid} (sleep)" in again.stdout
        assert (f"make hub-remove: could not remove {student}'s disk: {image}'s file system is still mounted at {home} in "
                f"the mount namespace of process {busy.pid} (sleep): {os.strerror(errno.EBUSY)}; that namespace's "
                f"processes: {busy.pid} (sleep)\n") in again.stderr
        assert "detached" not in again.stdout and disks.loop_devices(image) and pwd.getpwnam(student)
    finally:
        for process in (rooted, idle, busy):
            end(process)
    last = run_remove(room.state)
    assert last.returncode == 0, last.stdout + last.stderr
    assert f"removed the Unix account {student} and its home" in last.stdout
    assert not room.state.exists() and [f for f in backing_files() if f.startswith(f"{top}/")] == []


def removed(state, capsys):
    """`python -m autograder.hub --remove --state STATE`, run here: its exit status, what it said, what it said wrong."""
    with pytest.raises(SystemExit) as ended:
        make_hub.main(["--remove", "--state", str(state)])
    said = capsys.readouterr()
    return ended.value.code, said.out, said.err + (ended.value.code if isinstance(ended.value.code, str) else "")


@pytest.mark.skipif(os.geteuid() != 0, reason="make hub-remove runs as root")
def test_make_hub_remove_is_refused_while_the_class_s_hub_runs(tmp_path, capsys):
    room = classroom.Classroom(tmp_path / "state", "x-teacher", ["x-student1"], {})  # no account of it exists
    room.hub_dir.mkdir(parents=True)
    room.save()
    hub = subprocess.Popen(["sleep", "600"])
    room.hub_pid_file.write_text(str(hub.pid))
    try:
        status, _, err = removed(room.state, capsys)
    finally:
        end(hub)
    assert status and (room.hub_dir / "class.json").exists()
    assert err == (f"make hub-remove: the class's hub is running (pid {hub.pid}, {room.hub_pid_file}): stop it first "
                   "(Ctrl-C where make hub runs), then remove the class")
    assert removed(room.state, capsys)[:2] == (0, f"removed {room.state}\n")  # its pid file names no live process now
    status, _, err = removed(tmp_path / "none", capsys)
    assert status and err.startswith("make hub-remove: there is no class at")
