"""What a class on this machine needs before its hub starts, made once and reused by every later start.

    STATE/hub/class.json      who is in the class and their trial passwords (root's alone, 0600)
    STATE/envs/student        the students' Python: the student distribution, JupyterLab, nbgrader, the hub's
                              single-user server; no solutions_lib, no hidden cases, no solution notebooks
    STATE/envs/instructor     the instructor's: the course repository (editable, with grading), the same tools
    STATE/jupyter/ROLE        each role's Jupyter configuration (jupyter-config/ROLE, nbgrader's exchange, the
                              terminal's shell), root's; a student's server reads none from her home
    STATE/exchange            nbgrader's exchange, the instructor's alone before any student logs in: its course
                              folder with outbound, inbound and feedback, in nbgrader's modes
    STATE/disks, STATE/volumes  each student's disk: her home and her inbound (autograder/hub/disks.py)
    STATE/proxy               configurable-http-proxy, the hub's proxy, from the npm registry
    ~instructor/seqcourse     the instructor's copy of the course: what git tracks, and files it does not ignore

`make hub-remove` (`remove`) takes all of it down: the accounts and their homes, the disks, the class's folder.

The accounts are real Unix users, each with a home only they may enter: the exchange takes a submission's
owner from the file system, and one student must not read another's work. The checkout `make hub` runs from
holds the reference and the hidden cases: it must be one that no other account can read.
"""
from __future__ import annotations

import contextlib
import dataclasses
import grp
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from autograder.course import digest, find_root
from autograder.grading.exchange import INBOUND_MODE
from autograder.hub.disks import DiskError, Volumes, mounts_under, unmount_all

HOST = "localhost"  # the hub's pages on http://localhost:PORT, each user's server on http://NAME.localhost:PORT
COURSE = "seqcourse"  # nbgrader's course id: the exchange's folder, and the groups below
STUDENTS = f"nbgrader-{COURSE}"  # the JupyterHub groups nbgrader's JupyterHubAuthPlugin reads
INSTRUCTORS = f"formgrade-{COURSE}"
PROXY = "configurable-http-proxy@4.6.3"
ROLES = ("student", "instructor")
DIST_SOURCES = {"autograder", "course_lib", "notebooks", "solutions", "solutions_lib", "pyproject.toml"}  # the distribution's
SECRETS = ("solutions_lib/__init__.py", "autograder/assignments/__init__.py", "solutions")  # what no student may read
# nbgrader's modes for the course's folders in the exchange (release_assignment, release_feedback); the inbound sticky
EXCHANGE_MODES = {"": 0o755, "outbound": 0o755, "inbound": INBOUND_MODE, "feedback": 0o711}
DISK = 2 * 2**30  # each student's disk, by default


class ClassError(Exception):
    """What stops the class from being set up, said so that the person running it can act."""


@dataclasses.dataclass
class Classroom:
    state: Path
    instructor: str
    students: list
    passwords: dict
    home_base: str = "/home"
    disk: int = DISK  # each student's disk, in bytes
    disk_note: str = ""  # '' or why the students' disks are not limited on this machine

    @property
    def users(self):
        return [self.instructor, *self.students]

    def role(self, user):
        return "instructor" if user == self.instructor else "student"

    def env(self, role):
        return self.state / "envs" / role

    def config(self, role):
        return self.state / "jupyter" / role

    @property
    def exchange(self):
        return self.state / "exchange"

    @property
    def volumes(self):
        return Volumes(self.state)

    def home(self, user):
        return Path(pwd.getpwnam(user).pw_dir)

    @property
    def hub_dir(self):
        return self.state / "hub"

    @property
    def hub_pid_file(self):  # JupyterHub's (jupyterhub_config.py): a live process there is the class's running hub
        return self.hub_dir / "jupyterhub.pid"

    @property
    def proxy_pid_file(self):  # the proxy's (jupyterhub_config.py); proxy.py leaves its refusal beside it
        return self.hub_dir / "proxy.pid"

    @property
    def proxy(self):
        return self.state / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"

    @property
    def course_dir(self):
        return Path(pwd.getpwnam(self.instructor).pw_dir) / COURSE

    def save(self):
        path = self.hub_dir / "class.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"instructor": self.instructor, "students": self.students, "passwords": self.passwords,
                       "home_base": self.home_base, "disk": self.disk, "disk_note": self.disk_note}, f, indent=1)

    @classmethod
    def load(cls, state):
        state = Path(state)
        data = json.loads((state / "hub" / "class.json").read_text())
        return cls(state, data["instructor"], data["students"], data["passwords"], data.get("home_base", "/home"),
                   data.get("disk", DISK), data.get("disk_note", ""))


def prepare(state, students=3, prefix="seq-", home_base="/home", repo=None, say=print, disk=DISK):
    """The class under `state`, made or brought up to date: accounts, disks, exchange, configuration, environments,
    proxy. Returns the class, with `.disk_note`: '' or why the students' disks are not limited here."""
    if os.geteuid() != 0:
        raise ClassError("a class's hub creates Unix accounts and starts each user's server as that user: run it as root "
                         "(sudo make hub)")
    for tool in ("useradd", "npm", "bwrap"):
        if not shutil.which(tool):
            raise ClassError(f"`{tool}` is not installed: the hub needs it " + {
                "npm": "(Debian: apt-get install nodejs npm)", "bwrap": "to wall each student's server (Debian: apt-get "
                "install bubblewrap)", "useradd": "(Debian: package passwd)"}[tool])
    repo = Path(repo or find_root())
    exposed = readable_by_others(repo, SECRETS)
    if exposed:
        raise ClassError(f"other accounts on this machine can read {exposed}, the reference or hidden cases, and so could "
                         f"every student: make the checkout yours alone (chmod -R go-rwx {repo}) and run make hub again")
    state = Path(state)
    for folder, mode in ((state, 0o755), (state / "envs", 0o755), (state / "jupyter", 0o755), (state / "hub", 0o700)):
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, 0, 0)
        os.chmod(folder, mode)
    room = _roster(state, students, prefix, home_base)
    for user in room.users:
        _account(user, room.home_base, say)
    _exchange(room)
    teacher = pwd.getpwnam(room.instructor)
    try:
        room.disk_note = room.volumes.prepare(room.students, disk, room.home, (teacher.pw_uid, teacher.pw_gid), say)
    except DiskError as e:
        raise ClassError(str(e)) from None
    room.disk = disk
    room.save()
    for role in ROLES:
        _jupyter_config(repo, room, role)
    _proxy(room, say)
    _student_env(repo, room, say)
    _instructor_course(repo, room, say)
    _instructor_env(repo, room, say)
    return room


def _roster(state, students, prefix, home_base):
    """The class of an earlier start, with students added up to `students`; or a new one."""
    if (state / "hub" / "class.json").exists():
        room = Classroom.load(state)
    else:
        room = Classroom(state, f"{prefix}teacher", [], {}, str(home_base))
    for i in range(len(room.students) + 1, students + 1):
        room.students.append(f"{prefix}student{i}")
    for user in room.users:
        if not _valid_name(user):
            raise ClassError(f"{user!r} cannot be a Unix account and a hub user: use a --prefix of lowercase letters, "
                             "digits and '-', starting with a letter")
        room.passwords.setdefault(user, secrets.token_urlsafe(9))
    room.save()
    return room


def _valid_name(name):
    return 0 < len(name) <= 32 and name[0].isascii() and name[0].islower() and all(
        c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in name)


def _account(user, home_base, say):
    """A Unix account for `user` with a home only it may enter, made unless the class made it before. An account
    of that name that this class did not make is refused: its files are someone else's."""
    home = Path(home_base) / user
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        Path(home_base).mkdir(parents=True, exist_ok=True)
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash",
                        "--comment", f"{COURSE} hub", user], check=True, capture_output=True, text=True)
        pw = pwd.getpwnam(user)
        say(f"made the Unix account {user} (home {home})")
    if pw.pw_gecos != f"{COURSE} hub":
        raise ClassError(f"a Unix account named {user} already exists and this class did not make it: choose another "
                         "--prefix")
    os.chmod(pw.pw_dir, 0o700)  # Debian's useradd leaves homes readable by all


def _exchange(room):
    """nbgrader's exchange, made before any student may log in: its top folder and the course's folder with outbound,
    inbound and feedback, all the instructor's, in nbgrader's modes. Students write only into their own inbound, on
    their own disks, which their servers see in the inbound's place (autograder/hub/wall.py). A course folder someone
    else made, from an earlier class whose exchange was open to all, stops the class: its owner could read and change
    what is released and submitted there."""
    teacher = pwd.getpwnam(room.instructor)
    root, course = room.exchange, room.exchange / COURSE
    root.mkdir(exist_ok=True)
    for name, mode in EXCHANGE_MODES.items():
        folder = course / name if name else course
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            folder.mkdir(mode=0o700)
            st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (teacher.pw_uid, 0):
            owner = _user_name(st.st_uid)
            raise ClassError(f"{folder} belongs to {owner}, not the instructor {room.instructor}: someone made it before "
                             f"the class's exchange was set up, and could read or change what is released and submitted "
                             f"there. Remove it (rm -r {course}) and run make hub again")
    for path, mode in [(root, 0o755), *((course / n if n else course, m) for n, m in EXCHANGE_MODES.items())]:
        os.chown(path, teacher.pw_uid, teacher.pw_gid)
        os.chmod(path, mode)


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def readable_by_others(repo, names):
    """The first of `names` (paths in `repo`) that an account other than its owner and root may read, or ''. An
    account may read a file when it may search every folder above it and read it, by the bits for others or for
    a group it is in."""
    for name in names:
        path = Path(repo, name)
        if not path.exists():
            continue
        wanted = stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0)
        if _open_to_others(path, wanted) and all(_open_to_others(p, stat.S_IXOTH) for p in path.parents):
            return str(path)
    return ""


def _open_to_others(path, bits):
    """True when `bits` (given for others) are granted to others, or to a group that holds another account."""
    st = path.stat()
    if st.st_mode & bits == bits:
        return True
    return st.st_mode & (bits << 3) == bits << 3 and _group_has_others(st.st_gid, st.st_uid)


def _group_has_others(gid, owner):
    """True when an account other than `owner` and root is in the group `gid`."""
    try:
        members = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        members = set()
    members |= {p.pw_name for p in pwd.getpwall() if p.pw_gid == gid}
    return bool(members - {_user_name(owner), "root"})


def _jupyter_config(repo, room, role):
    """The role's Jupyter configuration, in a folder of its own that only root may change: jupyter-config/ROLE (which
    of nbgrader's tools the role sees), the exchange, kernels on Unix sockets, and the terminal's shell."""
    folder = room.config(role)
    shutil.copytree(repo / "jupyter-config" / role, folder, dirs_exist_ok=True)
    nbgrader = ('"""nbgrader for the hub\'s class: the shared exchange, and who is in the course from the hub\'s groups."""\n'
                "c = get_config()  # noqa: F821\n"
                f"c.CourseDirectory.course_id = {COURSE!r}\n"
                f"c.Exchange.root = {str(room.exchange)!r}\n"
                'c.Authenticator.plugin_class = "nbgrader.auth.JupyterHubAuthPlugin"\n')
    if role == "instructor":  # each student submits into an inbound on her own disk (autograder/hub/disks.py)
        inbounds = [str(room.volumes.inbound(s)) for s in room.students]
        nbgrader += f"c.Collect.student_inbounds = {inbounds!r}\n"
    (folder / "nbgrader_config.py").write_text(nbgrader)
    (folder / "jupyter_server_config.py").write_text(
        '"""Kernels talk to their server over Unix sockets in the user\'s own runtime folder, not loopback TCP ports: on\n'
        "a machine a class shares, kernels of two servers starting at once can race for a port (the loser dies), and\n"
        "any account may connect to a TCP port. A terminal is an interactive bash that keeps the role's environment\n"
        'first on PATH (a login shell would reset PATH from /etc/profile, and `nbgrader` would not be found)."""\n'
        "c = get_config()  # noqa: F821\n"
        'c.KernelManager.transport = "ipc"\n'
        f'c.ServerApp.terminado_settings = {{"shell_command": ["/bin/bash", "--rcfile", {str(folder / "bashrc")!r}, "-i"]}}\n')
    env = room.env(role)
    (folder / "bashrc").write_text(
        "# The shell of a JupyterLab terminal on the class's hub: the user's own settings, then the role's environment first.\n"
        "[ -f /etc/bash.bashrc ] && . /etc/bash.bashrc\n"
        "[ -f ~/.bashrc ] && . ~/.bashrc\n"
        f"export VIRTUAL_ENV={str(env)!r}\n"
        f'case ":$PATH:" in *":{env}/bin:"*) ;; *) export PATH="{env}/bin:$PATH" ;; esac\n')
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, 0, 0)
        os.chmod(path, 0o755 if path.is_dir() else 0o644)


def _proxy(room, say):
    if room.proxy.exists():
        return
    say(f"installing the hub's proxy ({PROXY}) from the npm registry")
    _run(["npm", "install", "--prefix", str(room.state / "proxy"), "--no-audit", "--no-fund", "--loglevel=error", PROXY])


def _student_env(repo, room, say):
    """The student distribution (python -m autograder release --student-dist), installed as a class gets it."""
    shipped = [n for n in _course_files(repo) if n.split("/")[0] in DIST_SOURCES]
    dist, source = room.state / "dist", digest(repo / name for name in shipped)
    if _venv_current(room.env("student"), repo, [source]):
        return
    _run([sys.executable, "-m", "autograder", "release", "--student-dist", str(dist), "--force"], cwd=repo)
    _venv(room.env("student"), repo, [f"{dist}[check]", "jupyterlab", "ipywidgets", "jupyterhub"], [source], say)


def _instructor_course(repo, room, say):
    """The instructor's copy of the course, made once: later starts keep their releases, submissions and grades."""
    course = room.course_dir
    if course.exists():
        return
    say(f"copying the course into {course}")
    for name in _course_files(repo):
        (course / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, course / name)
    _give(course, room.instructor)


def _course_files(repo):
    """The course's files: what git tracks and what it does not ignore, regular files only."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True).stdout
    names = [os.fsdecode(n) for n in listed.split(b"\0") if n]
    if not names:
        raise ClassError(f"{repo} is not a git checkout of the course: the hub copies the files git tracks")
    return [n for n in names if (repo / n).is_file() and not (repo / n).is_symlink()]


def _instructor_env(repo, room, say):
    course = room.course_dir
    _venv(room.env("instructor"), repo, ["-e", f"{course}[grading,lab]", "jupyterhub"],
          [digest([course / "pyproject.toml"])], say)
    _give(course, room.instructor)  # the editable install's metadata, written into the course as root


def _venv(folder, repo, packages, inputs, say):
    """A virtual environment at `folder` from a Python every account may run, with `packages` (pinned by the
    course's constraints.txt), rebuilt only when `inputs` (a digest of what it installs) has changed."""
    if _venv_current(folder, repo, inputs):
        return
    say(f"installing {folder} (about a minute)")
    if not (folder / "bin" / "python").exists():
        _run([shared_python(), "-m", "venv", str(folder)])
    _run([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
          "-c", str(repo / "constraints.txt"), *packages])
    (folder / STAMP).write_text(_want(repo, inputs))


STAMP = ".seqcourse-installed"


def _want(repo, inputs):
    return hashlib.sha256(json.dumps([inputs, (repo / "constraints.txt").read_text()]).encode()).hexdigest()


def _venv_current(folder, repo, inputs):
    """True when the environment at `folder` was installed from these inputs and constraints."""
    stamp = folder / STAMP
    return stamp.exists() and stamp.read_text() == _want(repo, inputs)


def shared_python():
    """A Python 3.11+ that every account may run: this one, unless it lives where others cannot reach (pyenv in
    root's home), then the system's."""
    for candidate in (sys._base_executable, shutil.which("python3.11"), "/usr/bin/python3"):
        if candidate and _reachable(Path(candidate).resolve()):
            version = subprocess.run([candidate, "-c", "import sys; print(sys.version_info >= (3, 11))"],
                                     capture_output=True, text=True).stdout.strip()
            if version == "True":
                return candidate
    raise ClassError("no Python 3.11 or newer that every account may run (this one lives in a folder others cannot "
                     "enter): install the system's python3 and python3-venv")


def _reachable(path):
    """Every folder above `path` searchable by others, and `path` readable and runnable by them."""
    try:
        if any(not p.stat().st_mode & stat.S_IXOTH for p in path.parents):
            return False
        return bool(path.stat().st_mode & stat.S_IXOTH and path.stat().st_mode & stat.S_IROTH)
    except OSError:
        return False


def _give(folder, user):
    pw = pwd.getpwnam(user)
    for path in [folder, *folder.rglob("*")]:
        os.lchown(path, pw.pw_uid, pw.pw_gid)


def _run(cmd, cwd=None):
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise ClassError(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return done


def end_running(program):
    """Every process running `program` (a script's path: the program or its interpreter's first argument) killed;
    the pids that were."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and os.fsencode(program) in (proc / "cmdline").read_bytes().split(b"\0")[:2]:
                os.kill(int(proc.name), signal.SIGKILL)
                found.append(proc.name)
    return found


def end_processes(users, tries=20):
    """Every process of these accounts killed (again, for a fork that outran a round); the pids still alive after
    `tries` rounds, [] when none is."""
    names = ",".join(users)
    for _ in range(tries):
        if not _processes(names):
            return []
        subprocess.run(["pkill", "-KILL", "-u", names], capture_output=True)
        time.sleep(0.1)
    return _processes(names)


def _processes(names):
    """The pids of the processes of these accounts (names joined by commas), zombies aside: a zombie holds nothing,
    and goes when its parent reaps it."""
    pids = subprocess.run(["pgrep", "-u", names], capture_output=True, text=True).stdout.split()
    return [pid for pid in pids if _state(pid) not in ("Z", "")]


def _state(pid):
    """A process's state letter (R, S, D, Z, ...), '' when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]  # after the name, which may hold ')'
    except (OSError, IndexError):
        return ""


def running_hub(room):
    """The pid of the class's hub while it runs (its pid file names a live process), else None."""
    try:
        pid = int(room.hub_pid_file.read_text())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and Path(f"/proc/{pid}").exists() else None


def remove(room, say=print):
    """The class taken down (`make hub-remove`, and the tests' clean-up): its accounts' processes ended, each
    student's home and disk unmounted and her image's loop device detached, every other mount under the class's folder
    unmounted, the accounts removed with their homes, then the class's folder. Nothing is unmounted lazily, so no
    image is deleted while mounted: a student whose disk is still in use keeps it and her account, and anything left
    keeps the class's folder. Says what it removed; returns what it could not remove, each in a line ([] when all is
    gone). Refused while the class's hub runs."""
    pid = running_hub(room)
    if pid:
        raise ClassError(f"the class's hub is running (pid {pid}, {room.hub_pid_file}): stop it first (Ctrl-C where "
                         "make hub runs), then remove the class")
    present = [user for user in room.users if _class_account(user)]
    alive = end_processes(present)
    left = [f"processes of the class's accounts that would not end: {' '.join(alive[:10])}"] if alive else []
    kept = room.volumes.unmount(room.students, lambda s: _home(room, s), say)
    left += [f"{student}'s disk: {why}" for student, why in kept.items()]
    in_use = {os.path.realpath(room.volumes.volume(student)) for student in kept}
    for path in reversed(mounts_under(room.state)):  # what else the class mounted there (her terminals' devpts)
        why = "" if path in in_use else unmount_all(path, say)
        left += [why] if why else []
    for user in present:
        why = f"the account {user}, kept with her disk" if user in kept else _remove_account(user)
        if why:
            left.append(why)
        else:
            say(f"removed the Unix account {user} and its home")
    if left:
        return left + [f"{room.state}, kept until all of the above is removed: run the removal again then"]
    try:
        shutil.rmtree(room.state)
    except OSError as e:
        return [f"{room.state}: {e}"]
    say(f"removed {room.state}")
    return []


def _home(room, user):
    """The home of a class's account, or where it was while the account is gone (a removal run again)."""
    return room.home(user) if _class_account(user) else Path(room.home_base, user)


def _remove_account(user):
    """'' once the account and its home are gone, or why they are not."""
    for _ in range(20):  # userdel refuses an account with a process still running
        end_processes([user], tries=1)
        done = subprocess.run(["userdel", "--remove", user], capture_output=True, text=True)
        if done.returncode in (0, 6):  # 6: no such account
            return ""
        time.sleep(0.25)
    return f"the account {user}: userdel --remove {user} failed ({done.returncode}): {done.stderr.strip()}"


def _class_account(user):
    try:
        return pwd.getpwnam(user).pw_gecos == f"{COURSE} hub"
    except KeyError:
        return False
