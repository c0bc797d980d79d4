"""The world a submission's code runs in while it is graded: a bubblewrap sandbox.

nbgrader's kernel for a submission starts inside `bwrap` and sees

- read-only: the Python environment, and the student side of one notebook
  (autograder.grading.views: what `release --student-dist` ships for it, without the
  stand-ins of that notebook's own exercises), as /course;
- writable: its scratch folder (a copy of the submission's folder, where it
  starts, and the kernel's sockets) and a private /tmp;

and nothing else: not the course repository (the reference, the solutions, the
catalogs, the hidden cases' code), not the gradebook, not `submitted/`,
`autograded/` or `feedback/`, not the instructor's home. It has no network, an
unprivileged uid, its own pid namespace (whatever it starts dies with it), and
limits on memory, CPU time, file size and processes. The kernel talks to
nbgrader over ZeroMQ's IPC transport through the scratch folder.

Where bubblewrap cannot start, grading stops with `problem()`'s message;
AUTOGRADER_NO_SANDBOX=1 (`grade --no-sandbox`) runs the kernel without it, for
trusted work only.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

from autograder.course import CourseError

NO_SANDBOX = "AUTOGRADER_NO_SANDBOX"
UNSAFE_NOTE = "graded without the sandbox (--no-sandbox): the learner's code ran with your rights; not safe for a class"
UID = 65534  # nobody
PIDS = "/sys/fs/cgroup/pids"
PASSED_ON = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "AUTOGRADER_CHECK_TIMEOUT", "TZ")  # from the grader's environment
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "fonts", "ssl", "alternatives")


def limits():
    """What one sandbox may use: far more than a normal submission needs (about 1 GiB, seconds of CPU)."""
    get = lambda name, default: int(os.environ.get(f"AUTOGRADER_{name}", default))  # noqa: E731
    return {"memory_mb": get("MEMORY_MB", 8192), "cpu_seconds": get("CPU_SECONDS", 900),
            "file_mb": get("FILE_MB", 512), "processes": get("PROCESSES", 256)}


def enabled():
    return os.environ.get(NO_SANDBOX, "") in ("", "0")


_problem = None


def problem():
    """'' when a sandbox can start here, else what is missing and how to get it."""
    global _problem
    if _problem is None:
        _problem = _probe()
    return _problem


def _probe():
    unsafe = "or, for trusted work only, grade with --no-sandbox (AUTOGRADER_NO_SANDBOX=1 for plain nbgrader)"
    if not sys.platform.startswith("linux"):
        return f"grading runs learners' code in a bubblewrap sandbox, which needs Linux: grade on a Linux machine or container, {unsafe}"
    if shutil.which("bwrap") is None:
        return f"bubblewrap is not installed: apt-get install bubblewrap (Debian, Ubuntu) or dnf install bubblewrap (Fedora); {unsafe}"
    with tempfile.TemporaryDirectory(prefix="autograder-probe-") as tmp:
        try:
            done = subprocess.run(_bwrap(Path(tmp), None, tmp) + [sys.executable, "-I", "-S", "-c", "pass"],
                                  capture_output=True, text=True, timeout=60)
            why = "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["no message"])[-1]
        except (OSError, subprocess.TimeoutExpired) as e:
            why = str(e)
    return why and (f"bubblewrap could not start a sandbox ({why}); unprivileged user namespaces may be off (sysctl "
                    f"kernel.unprivileged_userns_clone=1; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0), {unsafe}")


def require():
    """Stop, with the reason, where learner code cannot be sandboxed (unless the sandbox is turned off)."""
    if enabled() and problem():
        raise CourseError(problem())


def _bwrap(scratch, view, chdir, hide=()):
    """bwrap's arguments: the system and the Python environment read-only, `view` as /course,
    `scratch` writable, and `hide` (course folders inside a bound one) masked."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", str(UID), "--gid", str(UID), "--die-with-parent",
            "--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    system = [Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64") if os.path.exists(p)]
    system += [Path(p).resolve() for p in {sys.prefix, sys.base_prefix}] + [Path("/etc", n) for n in ETC if Path("/etc", n).exists()]
    bound = []
    for path in system:
        if path.is_symlink() and path.parent == Path("/"):  # /bin -> usr/bin on a merged-/usr system
            argv += ["--symlink", os.readlink(path), str(path)]
        else:
            argv += ["--ro-bind", str(path), str(path)]
            bound.append(path.resolve())
    specs = [importlib.util.find_spec(m) for m in ("solutions_lib", "autograder")]
    masked = [Path(p).resolve() for p in hide] + [Path(p) for s in specs if s for p in s.submodule_search_locations or []]
    argv += [arg for p in sorted({p for p in masked if any(b in p.parents for b in bound)}) for arg in ("--tmpfs", str(p))]
    argv += ["--ro-bind", str(view), "/course"] if view else []
    argv += ["--bind", str(scratch), str(scratch)]
    for source, dest in ((scratch / "cases.pt", scratch / "cases.pt"), (scratch / "passwd", "/etc/passwd")):
        argv += ["--ro-bind", str(source), str(dest)] if source.exists() else []
    return argv + ["--remount-ro", "/", "--chdir", str(chdir)]


class Sandbox:
    """One submission's sandbox: its scratch folder, the command that starts a kernel in it, and cleaning up."""

    def __init__(self, view, folder, cases, hide=(), sandboxed=True):
        self.view, self.hide, self.sandboxed, self.cgroup = view, hide, sandboxed, None
        self.scratch = Path(tempfile.mkdtemp(prefix="autograder-sandbox-"))
        os.chmod(self.scratch, 0o755)
        self.work, self.home, self.comm = self.scratch / "work", self.scratch / "home", self.scratch / "comm"
        shutil.copytree(folder, self.work, symlinks=True, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        self.home.mkdir()
        self.comm.mkdir()
        (self.scratch / "cases.pt").write_bytes(cases)
        (self.scratch / "passwd").write_text(f"student:x:{UID}:{UID}:student:{self.home}:/bin/sh\n")

    def command(self, kernel_cmd):
        """The kernel's command line: under the limits, in its pids cgroup (as root), inside the sandbox."""
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home),
               "IPYTHONDIR": str(self.home / ".ipython"), "MPLCONFIGDIR": str(self.home / ".matplotlib"),
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "NBGRADER_EXECUTION": "autograde",
               "AUTOGRADER_CASES": str(self.scratch / "cases.pt")} | {k: os.environ[k] for k in PASSED_ON if k in os.environ}
        if self.sandboxed:
            inner = _bwrap(self.scratch, self.view, self.work, self.hide) + ["--clearenv"]
            inner += [a for k, v in sorted((env | {"PYTHONPATH": "/course"}).items()) for a in ("--setenv", k, v)] + ["--"]
        else:
            inner = ["env"] + [f"{k}={v}" for k, v in sorted(env.items())]
        lim = limits()
        rlimits = [f"--as={lim['memory_mb'] * 2**20}", f"--cpu={lim['cpu_seconds']}", f"--fsize={lim['file_mb'] * 2**20}"]
        if os.geteuid() == 0:  # root ignores RLIMIT_NPROC: a pids cgroup of its own limits the sandbox instead
            self.cgroup = _pids_cgroup(lim["processes"])
        else:  # counts every process of this user: leave room for those already running
            rlimits.append(f"--nproc={len([p for p in os.listdir('/proc') if p.isdigit()]) + lim['processes']}")
        limited = ["prlimit"] + rlimits + ["--"] if shutil.which("prlimit") else []
        join = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(Path(self.cgroup, "cgroup.procs"))] if self.cgroup else []
        return join + limited + inner + kernel_cmd

    def kernel_manager(self):
        return SandboxKernelManager(kernel_name="python3", transport="ipc", ip=str(self.comm / "kernel"),
                                    connection_file=str(self.comm / "kernel.json"), sandbox=self)

    def close(self):
        if self.cgroup:
            _remove_cgroup(self.cgroup)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _pids_cgroup(max_processes):
    if not os.access(PIDS, os.W_OK):
        return None
    for stale in Path(PIDS).glob("autograder-*"):  # left by a grader that was killed: its sandbox died with it
        if not os.path.exists(f"/proc/{stale.name.split('-')[1]}"):
            _remove_cgroup(stale, wait=0)
    group = tempfile.mkdtemp(prefix=f"autograder-{os.getpid()}-", dir=PIDS)
    Path(group, "pids.max").write_text(str(max_processes))
    return group


def _remove_cgroup(group, wait=5.0):
    """Remove a pids cgroup once the sandbox's processes, which die with its pid namespace, have gone."""
    deadline = time.time() + wait
    while True:
        try:
            return os.rmdir(group)
        except OSError:
            if time.time() >= deadline:
                return
            time.sleep(0.05)


class SandboxKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs inside a `Sandbox`, reached over IPC sockets in its scratch folder."""

    def __init__(self, sandbox, **kwargs):
        super().__init__(**kwargs)
        self.sandbox = sandbox
        # ipykernel interrupts itself on request; a signal to bwrap's process group would end the sandbox
        self.kernel_spec.interrupt_mode = "message"

    def format_kernel_cmd(self, extra_arguments=None):
        # this environment's own kernel, whatever kernelspecs the machine has: the sandbox holds only this environment
        kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]
        return self.sandbox.command(kernel + list(extra_arguments or []))
