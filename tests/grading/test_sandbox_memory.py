"""A sandbox's memory is bounded wherever grading runs, or grading refuses to start (autograder.grading.sandbox).

As an attacker would try it: a submission that forks three children which each touch 1 GiB, graded by a non-root
account (a Unix account made for the test, as `make hub`'s instructor is one) through the Sandbox class as grading
uses it, in each of the places docs/GRADING.md names: a memory and a pids cgroup delegated to the account (the sandbox's
own groups are made inside them, and the sandbox never holds more than Limits.sandbox_memory_mb), a group with a memory
limit that is not the account's (a container's: the sandbox's processes are the ones the kernel kills), and neither
(grading refuses, and says how to get a bound). Version 2's rules are checked on the kernel where a version 2 hierarchy
has a controller of its own beside version 1's (hugetlb standing in for memory).
"""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.grading import cgroups, limits, sandbox
from conftest import ROOT
from test_exchange import unix_users

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(map(shutil.which, ("useradd", "setpriv", "unshare"))) or sandbox.problem() != "",
    reason="needs root (to make an account and hand it cgroups), useradd, setpriv, unshare and a sandbox that starts "
           f"here: {sandbox.problem() or 'not root, or a tool missing'}")
V1 = not cgroups.unified()
needs_v1_memory = pytest.mark.skipif(not (V1 and os.access(f"{cgroups.CGROUPS}/memory", os.W_OK)),
                                     reason="cgroup v1's memory hierarchy, writable by root (of version 2, only the delegation's rules are "
                                            "tested: test_on_cgroup_v2_a_delegated_group_hands_its_controllers_down)")
UNIFIED_BESIDE_V1 = Path(cgroups.CGROUPS, "unified")  # a hybrid machine's version 2 hierarchy

# The submission: three children that each touch 1 GiB and hold it until all three have it or one of them is gone.
HOG = r"""
import json, os, select, time
r, w = os.pipe()
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        held = b"\1" * 2**30  # every page of it written
        os.write(w, b"x")
        time.sleep(3600)
    children.append(pid)
os.close(w)
got, ended = 0, {}
while got < 3 and not ended:
    if select.select([r], [], [], 0.1)[0]:
        got += len(os.read(r, 3))
    for pid in children:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            ended[pid] = status
for pid in children:
    if pid not in ended:
        os.kill(pid, 9)
        ended[pid] = os.waitpid(pid, 0)[1]
print(json.dumps({"held": got, "signals": sorted(os.WTERMSIG(s) if os.WIFSIGNALED(s) else 0 for s in ended.values())}))
"""
# its tmpfs: 300 MB written to /tmp, where the sandbox's only writable storage is
FILL = r"""
with open("/tmp/fill", "wb") as f:
    for _ in range(300):
        f.write(b"\1" * 2**20)
print("filled")
"""
# The grader, as the account: the Sandbox as grading uses it (SandboxedExecute), the submission's command run to its
# end; what its memory group held at most, read before the group goes; then whether anything of its groups is left.
GRADER = r"""
import json, os, subprocess, sys, types
from pathlib import Path
from autograder.course import CourseError
from autograder.grading import cgroups, sandbox

args = json.loads(sys.argv[1])
seen = {"problem": sandbox.problem(), "bound": cgroups.memory_bound(), "runs": {}}
for name, code in args["runs"].items():
    box = sandbox.Sandbox(None, args["folder"], b"", types.SimpleNamespace(**args["limits"]))
    try:
        argv = box.command([sys.executable, "-c", code])
    except CourseError as e:
        seen["runs"][name] = {"refused": str(e)}
        box.close()
        continue
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    run = {"rc": done.returncode, "out": done.stdout, "err": done.stderr[-2000:], "groups": box.cgroups}
    for group in box.cgroups:
        for peak in ("memory.max_usage_in_bytes", "memory.peak"):
            if Path(group, peak).exists():
                run["peak"] = int(Path(group, peak).read_text())
        for events in ("memory.oom_control", "memory.events"):
            if Path(group, events).exists():
                run["oom_kills"] = int(dict(l.split() for l in Path(group, events).read_text().splitlines()).get("oom_kill", 0))
    box.close()
    run["left"] = [g for g in box.cgroups if os.path.exists(g)]
    seen["runs"][name] = run
print(json.dumps(seen))
"""


def reach(paths):
    """Shell lines (for a private mount namespace) that let an account with no capability reach `paths`, all of
    them readable but under a folder it may not enter (this machine's Python lives in root's home): that folder is
    covered by a tmpfs, the paths bound back into it."""
    lines, hidden = [], {}
    for path in map(lambda p: Path(p).resolve(), paths):
        closed = next((a for a in reversed(path.parents) if a != Path("/") and not os.stat(a).st_mode & 0o001), None)
        if closed is not None:
            hidden.setdefault(closed, []).append(path)
    for n, (closed, inside) in enumerate(hidden.items()):
        for m, path in enumerate(inside):
            lines.append(f'mkdir -p "$T/{n}-{m}" && mount --bind {path} "$T/{n}-{m}"')
        lines.append(f"mount -t tmpfs -o mode=755 none {closed}")
        for m, path in enumerate(inside):
            lines.append(f'mkdir -p {path} && mount --move "$T/{n}-{m}" {path}')
    return lines


def as_grader(account, script, argv, join=()):
    """Run the Python `script` with the arguments `argv` as `account` (its uid and group, no capability), first
    joined, as root, to the cgroups `join` (folders whose cgroup.procs it is written into)."""
    pw = pwd.getpwnam(account)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8",
           "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
    staging = tempfile.mkdtemp(prefix="seqcourse-reach-")
    try:
        lines = ["set -e", *reach([sys.base_prefix, sys.prefix, ROOT])]
        lines += [f'echo $$ > "{Path(g, "cgroup.procs")}"' for g in join]
        lines.append(f'exec setpriv --reuid={pw.pw_uid} --regid={pw.pw_gid} --clear-groups "$@"')
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(lines), "sh",
                               "env", "-i", *[f"{k}={v}" for k, v in env.items()], sys.executable, "-c", script,
                               *argv], env={"T": staging, "PATH": os.environ["PATH"]}, cwd="/",
                              capture_output=True, text=True, timeout=900)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def grade_as(account, runs, join=()):
    """What GRADER saw, grading `runs` ({name: the submission's code}) as `account` in the groups `join`."""
    lim = limits.load(ROOT)
    folder = Path(tempfile.mkdtemp(prefix="seqcourse-submission-"))
    try:
        os.chown(folder, pwd.getpwnam(account).pw_uid, -1)
        keep = ("memory_mb", "cpu_seconds", "scratch_mb", "sandbox_memory_mb", "processes", "check_seconds", "result_mb")
        done = as_grader(account, GRADER, [json.dumps({"folder": str(folder), "runs": runs,
                                                       "limits": {k: getattr(lim, k) for k in keep}})], join)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert done.returncode == 0, f"the grader did not survive:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), lim


def made_group(top, name, settings=None):
    group = Path(tempfile.mkdtemp(prefix=f"{name}-{os.getpid()}-", dir=top))
    group.chmod(0o755)  # as the kernel makes one (mkdtemp's is root's alone)
    for file, value in (settings or {}).items():
        if (group / file).exists():  # swap's, where the kernel counts it
            (group / file).write_text(str(value))
    return group


def swap_escapes(group):
    """True where a memory group's processes may swap out past its limit rather than be killed: swap, uncounted."""
    swap = next(int(l.split()[1]) for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("SwapTotal:"))
    return swap > 0 and not (Path(group, "memory.memsw.limit_in_bytes").exists() or Path(group, "memory.swap.max").exists())


def remove(*groups):
    for group in groups:
        cgroups.remove_cgroup(group)
    left = [str(g) for g in groups if Path(g).exists()]
    assert left == [], f"groups left: {left}"


def limit_above(folder, top):
    """The least memory limit of `folder` and its parents up to `top`, as cgroups.group_memory_limit reads it."""
    values = [int(Path(f, "memory.limit_in_bytes").read_text()) for f in [folder, *folder.parents] if f == top or top in f.parents]
    return min(values)


@needs_v1_memory
def test_a_delegated_group_bounds_the_whole_sandbox_and_the_grader_survives():
    """The account's groups are root's delegation (cgroups.delegate), as `make hub` gives the instructor's server:
    each sandbox's memory and pids groups are made inside them, and three children touching 1 GiB each never hold
    more than Limits.sandbox_memory_mb together; its tmpfs counts too."""
    with unix_users("grader") as accounts:
        pw = pwd.getpwnam(accounts["grader"])
        delegated = [made_group(Path(cgroups.CGROUPS, c), "sandbox-test") for c in ("memory", "pids")]
        try:
            join = [cgroups.delegate(g, pw.pw_uid, pw.pw_gid) for g in delegated]
            assert join == [str(g) for g in delegated]
            for group in delegated:  # what moves processes is the account's; the group's own limits stay root's
                assert {f: (group / f).stat().st_uid for f in ("cgroup.procs", "tasks", ".")} == dict.fromkeys(
                    ("cgroup.procs", "tasks", "."), pw.pw_uid)
            assert (delegated[0] / "memory.limit_in_bytes").stat().st_uid == 0 and (delegated[1] / "pids.max").stat().st_uid == 0
            seen, lim = grade_as(accounts["grader"], {"hog": HOG, "fill": FILL}, join)
            escapes = swap_escapes(delegated[0])
        finally:
            remove(*delegated)
    assert seen["problem"] == "" and seen["bound"] == "cgroup", seen
    hog, fill = seen["runs"]["hog"], seen["runs"]["fill"]
    assert sorted(Path(g).parent for g in hog["groups"]) == sorted(delegated), hog["groups"]  # inside the delegation
    assert hog["left"] == [] and fill["left"] == []
    limit = lim.sandbox_memory_mb * 2**20
    assert 2**30 < hog["peak"] <= limit, (hog["peak"], limit)  # it held more than one child's GiB, never more than its limit
    if not escapes:
        assert hog["oom_kills"] >= 1 and 9 in json.loads(hog["out"])["signals"], hog  # a child went, killed by the kernel
    assert fill["out"].strip() == "filled" and fill["peak"] >= 300 * 2**20, fill  # its tmpfs is in its memory


@needs_v1_memory
def test_without_a_group_of_its_own_the_graders_group_s_limit_bounds_it_and_the_sandbox_dies_first():
    """A container's case (a Kubernetes pod: a non-root uid, a memory limit on its own group that it may not change):
    no group of the sandbox's own, the container's limit for all, and the sandbox's processes are the ones the kernel
    kills when it is reached, not the grader."""
    container_limit = 1536 * 2**20
    with unix_users("grader") as accounts:
        container = made_group(Path(cgroups.CGROUPS, "memory"), "sandbox-test", {
            "memory.limit_in_bytes": container_limit, "memory.memsw.limit_in_bytes": container_limit})
        try:
            seen, lim = grade_as(accounts["grader"], {"hog": HOG}, [container])
            peak = int((container / "memory.max_usage_in_bytes").read_text())
            escapes = swap_escapes(container)
        finally:
            remove(container)
    assert seen["problem"] == "" and seen["bound"] == "grader's group", seen
    hog = seen["runs"]["hog"]
    assert not [g for g in hog["groups"] if Path(g).parent.name == "memory"], hog["groups"]  # no group of its own
    assert peak <= container_limit and (escapes or 9 in json.loads(hog["out"])["signals"]), (peak, hog)


@needs_v1_memory
def test_where_nothing_bounds_its_memory_grading_refuses_and_says_how_to_get_a_bound(tmp_path):
    """The same account in a group that is not its own and has no limit: no sandbox starts, through the Sandbox, the
    probe `grade` and plain nbgrader ask first, or `python -m autograder grade`; and the message says what to do."""
    top = Path(cgroups.CGROUPS, "memory")
    with unix_users("grader") as accounts:
        plain = made_group(top, "sandbox-test")
        try:
            if limit_above(plain, top) < cgroups._machine_memory():
                pytest.skip("this machine's own cgroup has a memory limit: a grader in it is bounded, and not refused")
            seen, _ = grade_as(accounts["grader"], {"hog": HOG}, [plain])
            course = Path(tempfile.mkdtemp(prefix="seqcourse-course-"))
            (course / "submitted" / "eve" / "05_self_attention").mkdir(parents=True)
            shutil.copy(ROOT / "notebooks" / "05_self_attention" / "05_self_attention.ipynb", course / "submitted" / "eve" / "05_self_attention")
            subprocess.run(["chown", "-R", accounts["grader"], str(course)], check=True)
            cli = as_grader(accounts["grader"], "import sys, runpy; sys.argv = ['autograder', 'grade', sys.argv[1], '--no-progress']; "
                            "runpy.run_module('autograder', run_name='__main__')", [str(course)], [plain])
            graded = (course / "autograded").exists() or (course / "grades.csv").exists()
            shutil.rmtree(course)
        finally:
            remove(plain)
    said = seen["problem"]
    assert said.startswith("grading cannot bound the memory of a sandbox: grader") and seen["bound"] == "", said
    for how in ("Grade as root", "make hub", "systemd-run --user --scope -p Delegate=yes", "autograder.grading.cgroups.delegate",
                "--no-sandbox"):
        assert how in said, how
    assert seen["runs"]["hog"] == {"refused": said}
    assert cli.returncode == 2 and f"error: {said}" in cli.stderr and not graded, cli.stderr[-2000:]


@pytest.mark.skipif(not (UNIFIED_BESIDE_V1 / "cgroup.controllers").exists()
                    or "hugetlb" not in (UNIFIED_BESIDE_V1 / "cgroup.controllers").read_text().split(),
                    reason="a version 2 hierarchy beside version 1's with a controller of its own (hugetlb), as on a "
                           "hybrid machine whose version 1 has no hugetlb hierarchy")
def test_on_cgroup_v2_a_delegated_group_hands_its_controllers_down():
    """Version 2's rules, on the kernel: a group whose children get controllers may hold no process, so delegate()
    gives the account's processes a leaf, and a systemd-like delegation (the folder, cgroup.procs, cgroup.threads,
    cgroup.subtree_control chowned, the account's processes in the group itself) gets its processes moved into that
    leaf by the grader; either way the sandbox's group is made beside the leaf with its limit, and joined."""
    top = UNIFIED_BESIDE_V1
    subtree = top / "cgroup.subtree_control"
    enabled_here = "hugetlb" not in subtree.read_text().split()
    if enabled_here:
        subtree.write_text("+hugetlb")
    script = r"""
import json, subprocess, sys
from pathlib import Path
from autograder.grading import cgroups
top = sys.argv[1]
groups = cgroups.make_cgroups({"hugetlb": {"hugetlb.2MB.max": 0}}, root=top)
v2 = lambda text: [line for line in text.splitlines() if line.startswith("0::")]
joined = [v2(subprocess.run(["sh", "-c", 'echo $$ > "$1" && cat /proc/self/cgroup', "join", str(Path(g, "cgroup.procs"))],
                            capture_output=True, text=True).stdout) for g in groups]
seen = {"groups": groups, "max": [Path(g, "hugetlb.2MB.max").read_text().strip() for g in groups], "joined": joined,
        "mine": v2(open("/proc/self/cgroup").read())}
for g in groups:
    cgroups.remove_cgroup(g)
print(json.dumps(seen))
"""
    try:
        with unix_users("grader") as accounts:
            pw = pwd.getpwnam(accounts["grader"])
            seen = {}
            for how in ("delegate", "systemd"):
                group = made_group(top, "sandbox-test")
                try:
                    if how == "delegate":
                        join = cgroups.delegate(group, pw.pw_uid, pw.pw_gid, controllers=("hugetlb",))
                        assert Path(join) == group / cgroups.LEAF and "hugetlb" in (group / "cgroup.subtree_control").read_text()
                        assert (group / "hugetlb.2MB.max").stat().st_uid == 0  # its own limit stays root's
                    else:  # as systemd hands a scope with Delegate=yes over: the kernel's list, processes in the group
                        for path in (group, *(group / f for f in ("cgroup.procs", "cgroup.threads", "cgroup.subtree_control"))):
                            os.chown(path, pw.pw_uid, pw.pw_gid)
                        join = group
                    done = as_grader(accounts["grader"], script, [str(top)], [join])
                    assert done.returncode == 0, done.stderr[-3000:]
                    seen[how] = (group, json.loads(done.stdout.strip().splitlines()[-1]))
                finally:
                    remove(group)
    finally:
        if enabled_here:
            subtree.write_text("-hugetlb")
    for how, (group, saw) in seen.items():
        inside = f"/{group.name}/"
        assert [Path(g).parent for g in saw["groups"]] == [group] and saw["max"] == ["0"], (how, saw)
        assert saw["joined"] == [[f"0::{inside}{Path(saw['groups'][0]).name}"]], (how, saw)
        assert saw["mine"] == [f"0::{inside}{cgroups.LEAF}"], (how, saw)  # the grader itself, in the leaf
