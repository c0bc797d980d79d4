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
and nohup included, ends when her server does), IPC namespace and session, and no privilege (no setuid program
works). The network is the machine's, so that the hub's proxy reaches her server on 127.0.0.1; every page her
server serves, whatever her configuration says, is on her own origin (jupyterhub_config.py), where it can act on
nothing of the hub's or anyone else's.
"""
from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

from autograder.grading.sandbox import CGROUPS, SYSTEM, USERNS_OFF, read_only
from autograder.hub.classroom import COURSE

EXCHANGE_TMPFS = 2**20  # the exchange's top folder as her server sees it: hers, in memory, nearly empty


def tmpfs_bytes(mem_bytes):
    """The size of each of her /tmp, /var/tmp and /dev/shm: a quarter of her memory, at least 64 MB."""
    return max(64 * 2**20, int(mem_bytes) // 4) if mem_bytes else 2**30


def argv(room, student, groups, mem_bytes):
    """bwrap's command line, up to `--`, for `student`'s server; `groups` are the cgroups it was started in."""
    home = pwd.getpwnam(student).pw_dir
    env = room.env("student")
    system, _ = read_only(SYSTEM + [Path("/etc")] + _python_home(env))
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "seqcourse", *system, "--proc", "/proc", "--dev", "/dev"]
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
        done = subprocess.run(["bwrap", "--unshare-pid", "--die-with-parent", *read_only(SYSTEM)[0], "--proc", "/proc",
                               "--", "true"], preexec_fn=become, capture_output=True, text=True, timeout=60, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap could not start as {student} ({e})"
    if done.returncode == 0:
        return ""
    why = (done.stderr.strip().splitlines() or ["no message"])[-1]
    return f"bubblewrap could not wall a server started as {student} ({why}): {USERNS_OFF}"
