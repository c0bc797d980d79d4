"""The cgroups that hold a student's server: its CPU, memory and process limits, and the end of every process in it.

Version 1 (one hierarchy a controller, as on this machine): a group under cpu, memory, pids and freezer each, its
socket memory bounded apart (memory.kmem.tcp.limit_in_bytes, a quarter of the memory limit). Version 2 (one
hierarchy): one group with cpu.max, memory.max and pids.max, socket memory counted in memory.max. Either way the server joins its groups
before it becomes the student, and whatever it starts (kernels, terminals, `setsid`, `nohup`, fork chains) is born
in them and cannot leave: the groups' files are root's. `end` stops them all: frozen, so that nothing forks while
they are killed, killed, then the groups removed; a group that cannot be removed is returned, to be reported.
"""
from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

from autograder.grading.cgroups import CGROUPS, make_cgroups, orphans, remove_cgroup, unified

PREFIX = "seqcourse-hub-"  # then the hub's pid: groups a killed hub left are removed at the next start
V1_CONTROLLERS = ("cpu", "memory", "pids", "freezer")
TCP_MEMORY = "memory.kmem.tcp.limit_in_bytes"  # version 1; version 2 counts socket memory in memory.max


def wanted(cpu=None, mem_bytes=None, pids=None):
    """The limits as version 1's settings, {controller: {file: value}}, which make_cgroups and v2_group take."""
    settings = {"freezer": {}}
    if cpu:
        settings["cpu"] = {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": int(cpu * 100_000)}
    if mem_bytes:  # version 1 counts socket buffers apart, and only once they have a limit: a quarter of her memory
        settings["memory"] = {"memory.limit_in_bytes": int(mem_bytes), TCP_MEMORY: int(mem_bytes) // 4}
    if pids:
        settings["pids"] = {"pids.max": int(pids)}
    return settings


def make(settings, root=CGROUPS):
    """The server's groups with these limits, and the controllers that hold (those root may make a group under)."""
    if unified(root):
        return v2_group(settings, root)
    groups = make_cgroups(settings, prefix=PREFIX)
    return groups, {Path(g).parent.name for g in groups}


def v2_group(settings, root=CGROUPS):
    """cgroup version 2: one group of this hub's for a server, with `settings`' limits (given as version 1 settings)
    as cpu.max, memory.max and pids.max, each where the hierarchy delegates that controller. Version 2 freezes and
    kills every group (cgroup.freeze, cgroup.kill), so `freezer` always holds. Returns ([the group] or [], the
    controllers that hold)."""
    root = Path(root)
    if not settings or not os.access(root, os.W_OK):
        return [], set()
    delegated = set((root / "cgroup.subtree_control").read_text().split())
    for controller in set(settings) - delegated - {"freezer"}:
        try:  # as systemd does for its own slices; refused where processes sit in the root of a container's tree
            (root / "cgroup.subtree_control").write_text(f"+{controller}")
            delegated.add(controller)
        except OSError:
            pass
    for stale in orphans(root, PREFIX):  # a killed hub's
        remove_cgroup(stale, wait=0)
    group = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root))
    held = {"freezer"} & set(settings)
    files = {"cpu": lambda s: ("cpu.max", f"{s['cpu.cfs_quota_us']} {s['cpu.cfs_period_us']}"),
             "memory": lambda s: ("memory.max", str(s["memory.limit_in_bytes"])),
             "pids": lambda s: ("pids.max", str(s["pids.max"]))}
    for controller, file in files.items():
        if settings.get(controller) and controller in delegated:
            name, value = file(settings[controller])
            (group / name).write_text(value)
            held.add(controller)
    return [str(group)], held


def members(group):
    """The pids in a group, [] when it is gone."""
    try:
        return [int(p) for p in Path(group, "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def end(groups, wait=10.0):
    """Every process in `groups` killed and the groups removed. Frozen first, where the machine can (version 1's
    freezer group, version 2's cgroup.freeze or cgroup.kill), so that no fork chain outruns the killing. Returns
    the groups that could not be removed, each with how many processes are still in it."""
    groups = [Path(g) for g in groups]
    freezers = [g for g in groups if g.parent.name == "freezer" or (g / "cgroup.freeze").exists()]
    killable = [g for g in freezers if (g / "cgroup.kill").exists()]
    for group in killable:  # version 2, Linux 5.14 and later: the kernel kills them all at once
        _write(group / "cgroup.kill", "1")
    for group in set(freezers) - set(killable):
        _freeze(group, True)
    for group in groups:
        for pid in members(group):
            _kill(pid)
    for group in set(freezers) - set(killable):
        _freeze(group, False)  # a SIGKILL reaches a frozen process once it thaws
    left = []
    for group in groups:
        deadline = time.monotonic() + wait
        while members(group) and time.monotonic() < deadline:
            for pid in members(group):
                _kill(pid)
            time.sleep(0.05)
        remove_cgroup(group, wait=max(0.0, deadline - time.monotonic()))
        if group.exists():
            left.append((str(group), len(members(group))))
    return left


def _freeze(group, frozen):
    if (group / "cgroup.freeze").exists():  # version 2
        _write(group / "cgroup.freeze", "1" if frozen else "0")
        return
    _write(group / "freezer.state", "FROZEN" if frozen else "THAWED")
    deadline = time.monotonic() + 5
    while frozen and time.monotonic() < deadline:
        try:
            if (group / "freezer.state").read_text().strip() != "FREEZING":
                return
        except OSError:
            return
        time.sleep(0.01)


def _write(path, text):
    try:
        Path(path).write_text(text)
    except OSError:
        pass


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def leftovers(hub_pid, root=CGROUPS):
    """The groups a hub of this pid made, every process in them ended: what `make hub` clears when its hub has
    stopped, whether it stopped its servers or was killed. Returns the groups it could not remove."""
    folders = [Path(root)] if unified(root) else [Path(root, c) for c in V1_CONTROLLERS]
    groups = [g for folder in folders for g in folder.glob(f"{PREFIX}{hub_pid}-*")]
    return end(groups) if groups else []
