"""The world a submission's code runs in while it is graded: a bubblewrap sandbox.

nbgrader's kernel for a submission starts inside `bwrap` and sees

- read-only: the Python environment; the student side of one notebook
  (autograder.grading.views: what a class is shipped for it, without the stand-ins
  of that notebook's own exercises) as /course; the submission's folder as
  /submission; and /grading, what the grader hands it (the cases' inputs, the
  kernel's connection file, the socket of the reference's answers);
- writable: one tmpfs of Limits.scratch_mb, in memory, as /tmp: its working folder
  (a copy of /submission), its home and its sockets;

and nothing else: not the course repository (the reference, the solutions, the
catalogs, the hidden cases' code), not the gradebook, not `submitted/`,
`autograded/` or `feedback/`, not the instructor's home, not one byte of the
host's disks to write to. It has no network, an unprivileged uid, its own pid
namespace (whatever it starts dies with it), and limits on memory, CPU time and
processes. The kernel binds its ZeroMQ sockets in its own /tmp; the grader reaches
them through /proc/PID/root of the sandbox's first process.

Its memory, its processes' and its tmpfs's together, is bounded by a memory cgroup of
its own (Limits.sandbox_memory_mb), its processes by a pids cgroup: both made by
autograder.grading.cgroups, as root or inside a group delegated to the grader's
account. Without a memory group, the grader's own group's memory limit is the bound
where it has one below the machine's memory, shared by every sandbox and the grader,
the sandboxes' processes the first the kernel kills (OOM_FIRST).

Where bubblewrap cannot start, or nothing can bound a sandbox's memory, grading stops
with `problem()`'s message; AUTOGRADER_NO_SANDBOX=1 (`grade --no-sandbox`) runs the
kernel without it, for trusted work only.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import shlex
import signal
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq
from jupyter_client.manager import AsyncKernelManager

from autograder.course import CourseError
from autograder.grading.cgroups import (UNSAFE, grader_group_bounds, limits_memory, limits_pids, make_cgroups,
                                        memory_bound, orphans, remove_cgroup, sandbox_settings, unbounded)

NO_SANDBOX = "AUTOGRADER_NO_SANDBOX"
UNSAFE_NOTE = "graded without the sandbox (--no-sandbox): the learner's code ran with your rights; not safe for a class"
UID = 65534  # nobody
OOM_FIRST = 1000  # the sandbox's oom_score_adj: where its group is not its own, the kernel kills its processes first
PASSED_ON = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TZ")  # from the grader's environment
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "fonts", "ssl", "alternatives")
GRADING, SUBMISSION, TMP = Path("/grading"), Path("/submission"), Path("/tmp")  # inside the sandbox
SHM_BYTES = 16 * 2**20  # /dev/shm (POSIX semaphores, shared memory); the rest of /dev is read-only
USERNS_OFF = ("unprivileged user namespaces may be off (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu also "
              "kernel.apparmor_restrict_unprivileged_userns=0)")
INFO_FD = "{info_fd}"  # in the kernel's command until it is launched with the pipe bwrap reports on


def enabled():
    return os.environ.get(NO_SANDBOX, "") in ("", "0")


_problem = None


def problem():
    """'' when a sandbox can start here, its memory bounded (`memory_bound`), else what is missing and how to get it."""
    global _problem
    if _problem is None:
        _problem = _probe()
    return _problem


def _probe():
    if not sys.platform.startswith("linux"):
        return f"grading runs learners' code in a bubblewrap sandbox, which needs Linux: grade on a Linux machine or container, {UNSAFE}"
    if shutil.which("bwrap") is None:
        return f"bubblewrap is not installed: apt-get install bubblewrap (Debian, Ubuntu) or dnf install bubblewrap (Fedora); {UNSAFE}"
    with tempfile.TemporaryDirectory(prefix="autograder-probe-") as tmp:
        try:
            done = subprocess.run(_bwrap(Path(tmp), None, None, 2**20) + [sys.executable, "-I", "-S", "-c", "pass"],
                                  capture_output=True, text=True, timeout=60)
            why = "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["no message"])[-1]
        except (OSError, subprocess.TimeoutExpired) as e:
            why = str(e)
    if why:
        return f"bubblewrap could not start a sandbox ({why}); {USERNS_OFF}, {UNSAFE}"
    return "" if memory_bound() else unbounded()


def require():
    """Stop, with the reason, where learner code cannot be sandboxed (unless the sandbox is turned off)."""
    if enabled() and problem():
        raise CourseError(problem())


SYSTEM = [Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64") if os.path.exists(p)]


def read_only(paths):
    """bwrap's arguments that show each of `paths` read-only at its own place, a link at / (/bin -> usr/bin on a
    merged-/usr system) as the same link; and the folders they bind."""
    argv, bound = [], []
    for path in map(Path, paths):
        if path.is_symlink() and path.parent == Path("/"):
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.resolve() not in bound:
            argv += ["--ro-bind", str(path), str(path)]
            bound.append(path.resolve())
    return argv, bound


def _bwrap(grading, view, submission, scratch_bytes, hide=()):
    """bwrap's arguments: the system and the Python environment read-only, `view` as /course,
    `submission` as /submission and `grading` as /grading (read-only), a tmpfs of `scratch_bytes`
    as /tmp, and `hide` (course folders inside a bound one) masked."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", str(UID), "--gid", str(UID), "--die-with-parent",
            "--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
            "--remount-ro", "/dev", "--size", str(scratch_bytes), "--tmpfs", str(TMP)]
    system = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix}] + [Path("/etc", n) for n in ETC if Path("/etc", n).exists()]
    shown, bound = read_only(SYSTEM + system)
    argv += shown
    specs = [importlib.util.find_spec(m) for m in ("solutions_lib", "autograder")]
    masked = [Path(p).resolve() for p in hide] + [Path(p) for s in specs if s for p in s.submodule_search_locations or []]
    argv += [arg for p in sorted({p for p in masked if any(b in p.parents for b in bound)}) for arg in ("--tmpfs", str(p))]
    argv += ["--ro-bind", str(view), "/course"] if view else []
    argv += ["--ro-bind", str(submission), str(SUBMISSION)] if submission else []
    argv += ["--ro-bind", str(grading), str(GRADING)]
    argv += ["--ro-bind", str(grading / "passwd"), "/etc/passwd"] if (grading / "passwd").exists() else []
    return argv + ["--remount-ro", "/", "--chdir", str(TMP)]


class Sandbox:
    """One submission's sandbox: what the grader hands it, the command that starts a kernel in it, and cleaning up.
    `folder` is the submission's folder, `cases` the bytes of its cases file, `limits` an autograder.grading.limits.Limits."""

    def __init__(self, view, folder, cases, limits, hide=(), sandboxed=True):
        self.view, self.folder, self.limits, self.hide, self.sandboxed, self.cgroups = view, Path(folder), limits, hide, sandboxed, []
        # the host's side of /grading: the hidden cases and the oracle's socket, the grader's alone (mkdtemp's 0700; the
        # kernel reaches them as the grader's user, which its user namespace maps it to)
        _remove_stale(Path(tempfile.gettempdir()))
        self.grading = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        (self.grading / "cases.pt").write_bytes(cases)
        (self.grading / "passwd").write_text(f"student:x:{UID}:{UID}:student:{TMP / 'home'}:/bin/sh\n")
        # without the sandbox, its folders are the host's, under the same names
        self.root = TMP if sandboxed else self.grading / "tmp"
        self.inside = GRADING if sandboxed else self.grading

    @property
    def oracle_socket(self):
        """Where the grader listens for requests for the reference's answers (autograder.grading.replay)."""
        return self.grading / "oracle.sock"

    def command(self, kernel_cmd, info_fd=None):
        """The kernel's command line: under the limits, in its memory and pids cgroups, inside the sandbox, after
        copying the submission into its working folder; bwrap writes its first process's pid on `info_fd`."""
        lim = self.limits
        home = self.root / "home"
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
               "IPYTHONDIR": str(home / ".ipython"), "MPLCONFIGDIR": str(home / ".matplotlib"),
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "NBGRADER_EXECUTION": "autograde",
               "AUTOGRADER_CASES": str(self.inside / "cases.pt"), "AUTOGRADER_ORACLE": str(self.inside / "oracle.sock"),
               "AUTOGRADER_CHECK_TIMEOUT": str(lim.check_seconds), "AUTOGRADER_RESULT_MB": str(lim.result_mb)}
        env |= {k: os.environ[k] for k in PASSED_ON if k in os.environ}
        start = ["sh", "-c", 'mkdir -p "$1/comm" "$1/home" && cp -R "$2" "$1/work" && cd "$1/work" && shift 2 && exec "$@"',
                 "start", str(self.root), str(SUBMISSION if self.sandboxed else self.folder)]
        if self.sandboxed:
            inner = _bwrap(self.grading, self.view, self.folder, lim.scratch_mb * 2**20, self.hide)
            inner += (["--info-fd", str(info_fd)] if info_fd is not None else []) + ["--clearenv"]
            inner += [a for k, v in sorted((env | {"PYTHONPATH": "/course"}).items()) for a in ("--setenv", k, v)] + ["--"]
        else:
            inner = ["env"] + [f"{k}={v}" for k, v in sorted(env.items())]
        rlimits = [f"--as={lim.memory_mb * 2**20}", f"--cpu={lim.cpu_seconds}", f"--fsize={lim.scratch_mb * 2**20}"]
        self._groups(lim)
        if os.geteuid() != 0 and not any(limits_pids(g) for g in self.cgroups):
            # root ignores RLIMIT_NPROC; for others it counts every process of the user: room for those already running
            rlimits.append(f"--nproc={len([p for p in os.listdir('/proc') if p.isdigit()]) + lim.processes}")
        limited = ["prlimit"] + rlimits + ["--"] if shutil.which("prlimit") else []
        first = f"{{ echo {OOM_FIRST} > /proc/self/oom_score_adj; }} 2>/dev/null; "  # where the memory is shared
        enter = "".join(f"echo $$ > {shlex.quote(str(Path(g, 'cgroup.procs')))} && " for g in self.cgroups)
        join = ["sh", "-c", first + enter + 'exec "$@"', "join"]  # no sandbox starts outside its groups
        return join + limited + inner + start + kernel_cmd

    def _groups(self, lim):
        """The sandbox's memory and pids cgroups (`make_cgroups`); where it gets no memory group, the grader's own
        group's limit must bound it (`memory_bound`), or, sandboxed, no sandbox starts."""
        if not self.cgroups:  # a kernel started again joins the same ones
            self.cgroups = make_cgroups(sandbox_settings(lim))
        if self.sandboxed and not any(limits_memory(g) for g in self.cgroups) and not grader_group_bounds():
            for group in self.cgroups:
                remove_cgroup(group)
            self.cgroups = []
            raise CourseError(unbounded())

    def kernel_manager(self):
        if not self.sandboxed:
            self.root.mkdir()
        return SandboxKernelManager(kernel_name="python3", transport="ipc", ip=str(self.root / "comm" / "kernel"),
                                    connection_file=str(self.grading / "kernel.json"), sandbox=self)

    def close(self):
        for group in self.cgroups:
            remove_cgroup(group)
        shutil.rmtree(self.grading, ignore_errors=True)


PREFIX = "autograder-sandbox-"  # then the grading process's pid


def _remove_stale(top):
    """The /grading folders under `top` that killed graders left, those of this user."""
    for stale in orphans(top, PREFIX):
        try:
            if stale.lstat().st_uid == os.geteuid():
                shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            pass


class SandboxKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs inside a `Sandbox`. The kernel binds its IPC sockets in the
    sandbox's own /tmp; the grader connects through /proc/PID/root, PID the sandbox's first process,
    which bwrap reports on --info-fd. Every message part the grader takes is at most Limits.frame_bytes."""

    def __init__(self, sandbox, **kwargs):
        super().__init__(**kwargs)
        self.sandbox = sandbox
        # ipykernel interrupts itself on request; a signal to bwrap's process group would end the sandbox
        self.kernel_spec.interrupt_mode = "message"

    def format_kernel_cmd(self, extra_arguments=None):
        # this environment's own kernel, whatever kernelspecs the machine has: the sandbox holds only this environment
        kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", str(self.sandbox.inside / "kernel.json")]
        return self.sandbox.command(kernel + list(extra_arguments or []), info_fd=INFO_FD)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        # the kernel inherits no descriptor of the grader's: its stdin, stdout and stderr go nowhere (Popen closes
        # every other one but the --info-fd pipe), so it can neither write into the worker's results nor its log
        kw |= {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "close_fds": True}
        if not self.sandbox.sandboxed:
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        r, w = os.pipe()
        try:
            kernel_cmd = [str(w) if a == INFO_FD else a for a in kernel_cmd]
            await super()._async_launch_kernel(kernel_cmd, pass_fds=(w,), **kw)
        finally:
            os.close(w)
        try:
            self.ip = f"/proc/{_child_pid(r)}/root{self.ip}"  # the same sockets, seen from the grader's side
        except RuntimeError:
            with contextlib.suppress(OSError):
                os.killpg(self.provisioner.process.pid, signal.SIGKILL)  # whatever did start goes too
            raise

    def client(self, **kwargs):
        client = super().client(**kwargs)
        client.context.setsockopt(zmq.MAXMSGSIZE, self.sandbox.limits.frame_bytes)
        return client


def _child_pid(fd, seconds=60):
    """The pid of the sandbox's first process, from the JSON bwrap writes on its --info-fd."""
    text, deadline = b"", time.monotonic() + seconds
    try:
        while len(text) < 65536:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            text += chunk
            try:
                return int(json.loads(text)["child-pid"])
            except ValueError:
                continue  # not all of it yet
            except (KeyError, TypeError):
                break
    finally:
        os.close(fd)
    raise RuntimeError("the sandbox did not start (bwrap gave no child pid)")
