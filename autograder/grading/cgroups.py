"""The cgroups that bound a grading sandbox: its memory and its processes.

Each sandbox (autograder.grading.sandbox) starts in a memory group and a pids group of its own (`make_cgroups` with
`sandbox_settings`: Limits.sandbox_memory_mb, swap included, for what its processes and its tmpfs hold, and
Limits.processes). As root they are made at the top of each hierarchy; otherwise, or where the top is not
writable, inside the grader's own group where that is delegated to the grading account (`cgroup_parents`).
`delegate` is root's side of that: it hands a group it made to an account, its limits staying root's, as `make
hub` does for the instructor's server (a systemd scope with Delegate=yes does the same on version 2). A group's
name carries its maker's pid: those of a grader killed mid-submission are removed by the next (`orphans`).

Where a sandbox gets no memory group, the grader's own group's memory limit bounds it where that is below the
machine's memory (a container's, a Kubernetes pod's: `group_memory_limit`), shared by every sandbox and the grader.
`memory_bound` says which bound holds here, `unbounded` why none does and how to get one.

Version 1 has a hierarchy a controller, each a folder under CGROUPS, and a group in each; version 2 has one
hierarchy and one group for both, and a delegated group whose children get controllers may hold no process of its
own: its processes move into a leaf of it first (LEAF).
"""
from __future__ import annotations

import contextlib
import errno
import os
import pwd
import subprocess
import tempfile
import time
from pathlib import Path

CGROUPS = "/sys/fs/cgroup"  # version 1: one hierarchy a controller, each a folder under it; version 2: the hierarchy
PIDS = f"{CGROUPS}/pids"
LEAF = "autograder-grader"  # version 2: a delegated group's own processes, moved out of it so that its children get limits
UNSAFE = "or, for trusted work only, grade with --no-sandbox (AUTOGRADER_NO_SANDBOX=1 for plain nbgrader)"


def memory_bound(root=CGROUPS):
    """How a sandbox's memory is bounded here: "cgroup" where a memory cgroup of its own can be made and joined (tried,
    then removed), "grader's group" where the grader's own group has a memory limit below the machine's memory, or ''."""
    joined = False
    try:
        groups = make_cgroups({"memory": _memory_settings(64 * 2**20, root)}, root=root)
    except OSError:
        groups = []
    try:
        for group in [g for g in groups if limits_memory(g)]:
            joined = subprocess.run(["sh", "-c", 'echo $$ > "$1"', "join", str(Path(group, "cgroup.procs"))],
                                    capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        for group in groups:
            remove_cgroup(group)
    if joined:
        return "cgroup"
    return "grader's group" if grader_group_bounds(root) else ""


def grader_group_bounds(root=CGROUPS):
    limit = group_memory_limit(root)
    return limit is not None and limit < _machine_memory()


def unbounded(root=CGROUPS):
    """Why a sandbox's memory cannot be bounded here, and how to get a bound."""
    v2 = unified(root)
    if os.geteuid() == 0:
        who = (f"root may make no memory cgroup here ({root if v2 else Path(root, 'memory')} is read-only or lacks the "
               f"memory controller, as in most containers)")
    else:
        try:
            name = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            name = f"uid {os.geteuid()}"
        own = own_cgroups().get("" if v2 else "memory", "?")
        who = f"{name} may make no memory cgroup (its own, {own}, is not delegated to it)"
    return (f"grading cannot bound the memory of a sandbox: {who}, and it runs in no cgroup with a memory limit below "
            f"the machine's memory, so one submission could take all of it. Grade as root; or in `make hub`'s "
            f"instructor's server, whose cgroups are delegated to the instructor; or in a cgroup delegated to you "
            f"(systemd with cgroup v2: systemd-run --user --scope -p Delegate=yes python -m autograder grade ...; "
            f"cgroup v1: root's autograder.grading.cgroups.delegate, docs/GRADING.md); {UNSAFE}")


def orphans(top, prefix):
    """What a grader killed mid-submission left under `top`: the entries named prefix<pid>-... whose pid is gone."""
    for path in top.glob(f"{prefix}*-*"):
        pid = path.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            yield path


def sandbox_settings(lim, root=CGROUPS):
    """A sandbox's cgroup settings, {controller: {file: value}}: Limits.sandbox_memory_mb for its memory, swap
    included, and Limits.processes."""
    return {"pids": {"pids.max": lim.processes}, "memory": _memory_settings(lim.sandbox_memory_mb * 2**20, root)}


def _memory_settings(limit, root=CGROUPS):
    if unified(root):
        return {"memory.max": limit, "memory.swap.max": 0}
    return {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}  # memsw: memory and swap together


def limits_memory(group):
    return any(Path(group, name).exists() for name in ("memory.limit_in_bytes", "memory.max"))


def limits_pids(group):
    return Path(group, "pids.max").exists()


def unified(root=CGROUPS):
    """True on a machine with cgroup version 2 alone (one hierarchy for every controller)."""
    return Path(root, "cgroup.controllers").exists()


def own_cgroups(text=None):
    """This process's cgroups, from /proc/self/cgroup: {controller: path in its hierarchy}, version 2's under ''."""
    found = {}
    for line in (Path("/proc/self/cgroup").read_text() if text is None else text).splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def cgroup_parents(controllers, root=CGROUPS):
    """{controller: folder} for each of `controllers` under which this process may make a sandbox's group: as root,
    the top of its hierarchy; otherwise, or where the top is not writable, this process's own group where that is
    this account's to write (delegated to it: `delegate`). Version 2 has one hierarchy, so one folder for all, whose
    own processes first go into a leaf of it (LEAF), the kernel's rule for a group whose children get controllers."""
    own = own_cgroups()
    if unified(root):
        top = Path(root)
        folders = [top] if os.geteuid() == 0 else []
        if "" in own:
            mine = _within(top, own[""])
            folders.append(mine.parent if mine.name == LEAF else mine)  # already handed down (or by `delegate`)
        for folder in folders:
            if all(os.access(p, os.W_OK) for p in (folder, folder / "cgroup.procs", folder / "cgroup.subtree_control")):
                held = _hand_down(folder, controllers)
                if held:
                    return {c: folder for c in held}
        return {}
    found = {}
    for controller in controllers:
        top = Path(root, controller)
        mine = [_within(top, own[controller])] if controller in own else []
        for folder in ([top] if os.geteuid() == 0 else []) + mine:
            if folder.is_dir() and os.access(folder, os.W_OK):
                found[controller] = folder
                break
    return found


def _within(mount, path):
    return Path(mount, path.lstrip("/"))


def _hand_down(group, controllers):
    """Version 2: `controllers` (those `group` has) enabled for `group`'s children; where processes sit in `group`
    (the kernel refuses then), they are moved into its leaf first. Returns the controllers its children get."""
    wanted = [c for c in controllers if c in _read(group / "cgroup.controllers").split()]
    for controller in wanted:
        for attempt in range(2):
            if controller in _read(group / "cgroup.subtree_control").split():
                break
            try:
                (group / "cgroup.subtree_control").write_text(f"+{controller}")
            except OSError as e:
                if e.errno != errno.EBUSY or attempt:
                    break
                _into_leaf(group)
    return [c for c in wanted if c in _read(group / "cgroup.subtree_control").split()]


def _into_leaf(group):
    """Version 2: every process in `group` moved into its leaf, LEAF (made if need be)."""
    leaf = group / LEAF
    with contextlib.suppress(FileExistsError):
        leaf.mkdir()
    for _ in range(100):  # what forks meanwhile is moved in the next round
        pids = _read(group / "cgroup.procs").split()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):  # gone meanwhile
                (leaf / "cgroup.procs").write_text(pid)


def _read(path):
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def group_memory_limit(root=CGROUPS):
    """The memory limit, in bytes, that bounds this process's own cgroup: the least of its own and its ancestors' that
    it can see (in a container, its own group shows as the top); None where there is none."""
    v2 = unified(root)
    mount = Path(root) if v2 else Path(root, "memory")
    path = own_cgroups().get("" if v2 else "memory")
    folder = _within(mount, path) if path else mount
    if not folder.is_dir():  # a container's own group, seen as the top, under its host's path
        folder = mount
    limits = []
    while True:
        text = _read(folder / ("memory.max" if v2 else "memory.limit_in_bytes")).strip()
        if text.isdigit():
            limits.append(int(text))
        if folder == mount or mount not in folder.parents:
            return min(limits, default=None)
        folder = folder.parent


def _machine_memory():
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def make_cgroups(wanted, prefix="autograder-", root=CGROUPS):
    """For {controller: {file: value}}: a cgroup of the caller's own for each controller it may make one for
    (`cgroup_parents`: as root at the top, otherwise inside its own delegated group), with those settings (a setting
    the kernel lacks, swap's on a machine without it, is left out); on version 2, one group for them all. Its memory
    group counts the sandbox's tmpfs too: what its processes and files hold. The name carries this process's pid:
    groups left by a process that is gone are removed first."""
    made = {}
    try:
        for controller, parent in cgroup_parents(list(wanted), root).items():
            if parent not in made:
                for stale in orphans(parent, prefix):  # its sandbox died with it
                    remove_cgroup(stale, wait=0)
                made[parent] = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)
            for name, value in wanted[controller].items():
                if Path(made[parent], name).exists():
                    Path(made[parent], name).write_text(str(value))
    except OSError:
        for group in made.values():
            remove_cgroup(group, wait=0)
        raise
    return list(made.values())


def remove_cgroup(group, wait=5.0):
    """Remove a cgroup, and the groups inside it, once their processes (a sandbox's die with its pid namespace) have gone."""
    deadline = time.time() + wait
    with contextlib.suppress(OSError):
        for child in [p for p in Path(group).iterdir() if p.is_dir()]:
            remove_cgroup(child, max(0.0, deadline - time.time()))
    while True:
        try:
            return os.rmdir(group)
        except OSError:
            if time.time() >= deadline:
                return
            time.sleep(0.05)


def delegate(group, uid, gid, controllers=("memory", "pids")):
    """Hand the cgroup `group`, which root made, to the account uid:gid, so that grading as that account makes each
    sandbox's group inside it (`cgroup_parents`). Only what makes and moves into groups becomes the account's, never
    `group`'s own limits: version 1, the folder, cgroup.procs, tasks and cgroup.clone_children (the kernel makes a
    child's files its maker's); version 2, the kernel's delegation: the folder, cgroup.procs, cgroup.threads and
    cgroup.subtree_control, after `controllers` are handed down to its children and a leaf (LEAF) is made for its
    own processes. Returns the folder whose cgroup.procs the account's first process joins, as root, before it
    becomes the account: `group` itself on version 1, its leaf on version 2."""
    group = Path(group)
    if (group / "cgroup.controllers").exists():
        _hand_down(group, controllers)
        with contextlib.suppress(FileExistsError):
            (group / LEAF).mkdir()
        files, join = ("cgroup.procs", "cgroup.threads", "cgroup.subtree_control"), group / LEAF
    else:
        files, join = ("cgroup.procs", "tasks", "cgroup.clone_children"), group
    for path in (group, *(group / f for f in files)):
        if path.exists():
            os.chown(path, uid, gid)
    return str(join)
