"""The wall around a student's server: what it sees of the machine, and its own places to write.

Her server starts as her account inside bubblewrap (unprivileged, as grading's sandbox: autograder/grading/sandbox.py),
which shows it

- read-only: the system (/usr and the links to it, /etc), the students' Python environment and Jupyter
  configuration, the exchange's outbound and feedback folders, the CPU list, and her own cgroups as /sys/fs/cgroup
  (the course reads her CPU quota there);
- writable: her home and her inbound, on her own disk (autograder/hub/disks.py), and private /tmp, /var/tmp and
  /dev/shm in memory, each at most a quarter of her memory limit and counted in it, gone when her server stops;

and nothing else: no other home, none of the class's state (the passwords, the hub's database), not the instructor's
course or checkout, not the machine's /tmp or /dev/shm. It has its own pid namespace (whatever she starts, setsid
and nohup included, ends when her server does), IPC namespace, session and network namespace: a loopback of her own,
joined to the machine only by the relay (autograder/hub/relay.py) that carries the proxy's connections to her server
and her server's to the hub's API, so that the ports, connections and socket memory she uses are hers alone. Her
terminals take pseudo-terminals from a devpts of her own, of at most `ptys` (the class's share of the machine's).
She may make no namespace of her own (--disable-userns) and no system call of autograder/hub/seccomp.py's list, and
has no privilege (no setuid program works). Every page her server serves, whatever her configuration says, is on
her own origin (jupyterhub_config.py), where it can act on nothing of the hub's or anyone else's.
"""
from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

from autograder.grading.cgroups import CGROUPS
from autograder.grading.sandbox import SYSTEM, USERNS_OFF, read_only
from autograder.hub.classroom import COURSE

EXCHANGE_TMPFS = 2**20  # the exchange's top folder as her server sees it: hers, in memory, nearly empty


def tmpfs_bytes(mem_bytes):
    """The size of each of her /tmp, /var/tmp and /dev/shm: a quarter of her memory, at least 64 MB."""
    return max(64 * 2**20, int(mem_bytes) // 4) if mem_bytes else 2**30


def argv(room, student, groups, mem_bytes, seccomp_fd=None):
    """bwrap's command line, up to `--`, for `student`'s server; `groups` are the cgroups it was started in,
    `seccomp_fd` a descriptor holding the filter of autograder/hub/seccomp.py (None: no filter)."""
    home = pwd.getpwnam(student).pw_dir
    env = room.env("student")
    system, _ = read_only(SYSTEM + [Path("/etc")] + _python_home(env))
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-user", "--disable-userns", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try", "--hostname", "seqcourse",
            *system, "--proc", "/proc", "--dev", "/dev", "--dev-bind", str(pty_folder(room, student)), "/dev/pts"]
    args += ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    for scratch in ("/tmp", "/var/tmp", "/dev/shm"):
        args += ["--size", str(tmpfs_bytes(mem_bytes)), "--tmpfs", scratch]
    args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    for group in map(Path, groups):  # version 1: /sys/fs/cgroup/CONTROLLER; version 2: /sys/fs/cgroup
        args += ["--ro-bind", str(group), CGROUPS if group.parent == Path(CGROUPS) else f"{CGROUPS}/{group.parent.name}"]
    args += ["--ro-bind", str(env), str(env), "--ro-bind", str(room.config("student")), str(room.config("student"))]
    args += ["--bind", str(room.volumes.home(student)), home]
    course = room.exchange / COURSE
    args += ["--size", str(EXCHANGE_TMPFS), "--tmpfs", str(room.exchange),
             "--ro-bind", str(course / "outbound"), str(course / "outbound"),
             "--ro-bind", str(course / "feedback"), str(course / "feedback"),
             "--bind", str(room.volumes.inbound(student)), str(course / "inbound")]
    return args + ["--remount-ro", "/", "--chdir", home, "--"]


PTYS = 64  # pseudo-terminals a student may hold at once, where the machine lends enough for the class
PTY_MAX, PTY_RESERVE = Path("/proc/sys/kernel/pty/max"), Path("/proc/sys/kernel/pty/reserve")


def pty_count(students):
    """Pseudo-terminals each student may hold at once: PTYS, or her share of those the machine lends to devpts
    instances other than its own (kernel.pty.max less kernel.pty.reserve), so that the class cannot take them all."""
    try:
        shared = int(PTY_MAX.read_text()) - int(PTY_RESERVE.read_text())
    except (OSError, ValueError):
        return PTYS
    return max(1, min(PTYS, shared // max(1, students)))


FILE_MAX = Path("/proc/sys/fs/file-max")


def widen_file_table(students, pids, files, table=FILE_MAX):
    """The machine's table of open files made to hold every student's processes at their RLIMIT_NOFILE at once
    (`students` x `pids` x `files` more than it holds), as systemd leaves it (at its largest): it is only a count,
    and each open file's memory is counted in its student's memory cgroup, which bounds them. Returns a line for
    `make hub` to print, '' when the table was large enough."""
    try:
        size = int(table.read_text())
    except (OSError, ValueError):
        return ""
    needed = students * pids * files
    if size >= 2 * needed:
        return ""
    try:
        table.write_text(str(size + 2 * needed))
    except OSError as e:
        return (f"the machine's table of open files ({table}: {size}) is smaller than the students could fill "
                f"({students} x {pids} processes x {files} files) and could not be widened ({e.strerror})")
    return f"widened the machine's table of open files ({table}) from {size} to {size + 2 * needed}"


def pty_folder(room, student):
    return room.state / "pts" / student


def mount_ptys(room, student):
    """Her devpts, of at most pty_count(class) terminals, mounted (root's, once) where her wall shows it as /dev/pts."""
    folder = pty_folder(room, student)
    folder.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(folder):
        subprocess.run(["mount", "-t", "devpts", "-o", f"newinstance,ptmxmode=0666,mode=0620,max={pty_count(len(room.students))}",
                        "devpts", str(folder)], check=True, capture_output=True, text=True)
    return folder


def _python_home(env):
    """The Python the environment was made from, where /usr does not hold it (a venv's `home` in pyvenv.cfg)."""
    try:
        lines = (Path(env) / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return []
    home = next((line.split("=", 1)[1].strip() for line in lines if line.split("=", 1)[0].strip() == "home"), "")
    prefix = Path(home).resolve().parent if home else None
    return [prefix] if prefix and Path("/usr") not in [prefix, *prefix.parents] else []



def problem(student):
    """'' when bubblewrap can wall a server started as `student` here; else what stops it and how to mend it. A
    student's server is started as her account, so its wall needs user namespaces that unprivileged users may make."""
    pw = pwd.getpwnam(student)

    def become():
        os.setgid(pw.pw_gid)
        os.setgroups([])
        os.setuid(pw.pw_uid)
    try:
        done = subprocess.run(["bwrap", "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-net",
                               "--die-with-parent", *read_only(SYSTEM)[0], "--proc", "/proc", "--", "true"],
                              preexec_fn=become, capture_output=True, text=True, timeout=60, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap could not start as {student} ({e})"
    if done.returncode == 0:
        return ""
    why = (done.stderr.strip().splitlines() or ["no message"])[-1]
    if "disable-userns" in why:
        return f"bubblewrap is too old to wall a student's server ({why}): the hub needs bubblewrap 0.8 or later"
    return f"bubblewrap could not wall a server started as {student} ({why}): {USERNS_OFF}"
