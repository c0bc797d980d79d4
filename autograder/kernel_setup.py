"""Run at the start of every grading kernel (see nbgrader_config.py).

- Warnings go to stdout: nbgrader scores a test cell 0 if it writes to stderr,
  and a warning is not a mistake. Errors still reach the cell as errors.
- `apply_limits` caps what one submission can take: memory, CPU time, the
  size of files it writes, and the number of processes, so that an endless
  allocation or a fork bomb fails inside that submission and nowhere else.
"""
import os
import resource
import sys
import warnings


def _show_on_stdout(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {category.__name__}: {message}", file=sys.stdout)


def route_warnings():
    warnings.showwarning = _show_on_stdout


def _set(limit, value):
    soft, hard = resource.getrlimit(limit)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(limit, (value, value if hard == resource.RLIM_INFINITY else hard))


PIDS = "/sys/fs/cgroup/pids"


def _pids_cgroup(max_processes):
    """Root ignores RLIMIT_NPROC; a pids cgroup of its own limits this kernel instead."""
    if not os.path.isdir(PIDS) or not os.access(PIDS, os.W_OK):
        return False
    # named after the grading process that started this kernel, which sweeps it afterwards
    group = os.path.join(PIDS, f"autograder-{os.getppid()}-{os.getpid()}")
    try:
        os.makedirs(group, exist_ok=True)
        with open(os.path.join(group, "pids.max"), "w") as fh:
            fh.write(str(max_processes))
        with open(os.path.join(group, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    except OSError:
        return False
    return True


def apply_limits(memory_mb=None, cpu_seconds=None, file_mb=None, processes=None):
    """Limit this kernel and everything it starts. None leaves a limit as it is."""
    if memory_mb:
        _set(resource.RLIMIT_AS, memory_mb * 2**20)
    if cpu_seconds:
        _set(resource.RLIMIT_CPU, cpu_seconds)
    if file_mb:
        _set(resource.RLIMIT_FSIZE, file_mb * 2**20)
    if processes:
        if os.geteuid() == 0:
            _pids_cgroup(processes)
        else:
            # counts every process of this user, so leave room for the ones already running
            running = len([p for p in os.listdir("/proc") if p.isdigit()]) if os.path.isdir("/proc") else 0
            _set(resource.RLIMIT_NPROC, running + processes)


def sweep(owner=None, wait=5.0):
    """Kill whatever the kernels started by process `owner` (default: this one) left
    running in their pids cgroups, and remove those cgroups."""
    import glob
    import signal
    import time

    owner = os.getpid() if owner is None else owner
    for group in glob.glob(os.path.join(PIDS, f"autograder-{owner}-*")):
        deadline = time.time() + wait
        while True:
            try:
                with open(os.path.join(group, "cgroup.procs")) as fh:
                    pids = [int(p) for p in fh.read().split()]
            except OSError:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.rmdir(group)
                break
            except OSError:
                if time.time() > deadline:
                    break  # a later sweep removes it
                time.sleep(0.05)
