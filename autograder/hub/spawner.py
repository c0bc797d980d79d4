"""Each user's server, started as that user in their role's environment and under the class's limits; the trial login."""
from __future__ import annotations

import hmac
import os
import pwd
import signal
import tempfile
from pathlib import Path

from jupyterhub.auth import Authenticator
from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Unicode

from autograder.grading.sandbox import CGROUPS, _orphans, make_cgroups, remove_cgroup
from autograder.hub.classroom import Classroom

CGROUP_PREFIX = "seqcourse-hub-"  # then the hub's pid: groups a killed hub left are removed at the next start
TRIAL = ("A trial login: each account's password was printed by `make hub`. For a real class, use your institution's "
         "login (LTI 1.3: ltiauthenticator; OAuth or SAML: oauthenticator).")


class TrialAuthenticator(Authenticator):
    """The passwords `make hub` made and printed (STATE/hub/class.json): fit for a trial run on one machine only."""

    state = Unicode(help="the class's state folder").tag(config=True)

    async def authenticate(self, handler, data):
        room = Classroom.load(self.state)
        user, given = data.get("username", ""), data.get("password", "")
        want = room.passwords.get(user)
        if want is not None and hmac.compare_digest(want.encode(), given.encode()):
            return user
        return None


class ClassSpawner(LocalProcessSpawner):
    """LocalProcessSpawner (a server started as the user's Unix account) with the user's role: its environment
    (the student distribution's or the course's), its Jupyter configuration (which of nbgrader's tools it sees), its
    folder, and for students `cpu_limit` and `mem_limit`, held by cgroups where the machine lets root make them."""

    state = Unicode(help="the class's state folder").tag(config=True)

    def _room(self):
        return Classroom.load(self.state)

    def get_env(self):
        room = self._room()
        role = room.role(self.user.name)
        env = super().get_env()
        env["PATH"] = f"{room.env(role) / 'bin'}:/usr/local/bin:/usr/bin:/bin"
        env["JUPYTER_CONFIG_PATH"] = str(room.config(role))
        env["JUPYTER_RUNTIME_DIR"] = str(self._runtime(room))
        env.pop("PYTHONPATH", None)  # the hub's own, which could reach the reference
        return env

    def _runtime(self, room):
        """The user's runtime folder (their kernels' sockets), made by root in the class's folder, the user's alone:
        short, since a Unix socket's path holds at most 107 bytes, and where no one else can make it first."""
        pw = pwd.getpwnam(self.user.name)
        folder = room.state / "run" / str(pw.pw_uid)
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, pw.pw_uid, pw.pw_gid)
        os.chmod(folder, 0o700)
        return folder

    async def start(self):
        room = self._room()
        role = room.role(self.user.name)
        self.cmd = [str(room.env(role) / "bin" / "jupyterhub-singleuser")]
        self.notebook_dir = str(room.course_dir) if role == "instructor" else ""
        self.default_url = "/lab"
        self.cgroups = self._limits() if role == "student" else []  # the instructor grades: J sandboxes of their own
        return await super().start()

    def _limits(self):
        wanted = {}
        if self.cpu_limit:
            wanted["cpu"] = {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": int(self.cpu_limit * 100_000)}
        if self.mem_limit:
            wanted["memory"] = {"memory.limit_in_bytes": int(self.mem_limit)}
        if unified():
            groups, held = v2_group(wanted)
        else:
            groups = make_cgroups(wanted, prefix=CGROUP_PREFIX)
            held = {Path(g).parent.name for g in groups}
        for group in groups:  # readable by the user's processes: the course reads its CPU quota (runtime.usable_cpus)
            os.chmod(group, 0o755)
        missing = set(wanted) - held
        if missing:
            self.log.warning("%s's %s limit is not enforced: root may not make a %s cgroup under %s here", self.user.name,
                             " and ".join(sorted(missing)), " or ".join(sorted(missing)), CGROUPS)
        return groups

    def make_preexec_fn(self, name):
        become = super().make_preexec_fn(name)
        groups, folder = list(getattr(self, "cgroups", [])), self.notebook_dir

        def preexec():  # in the child, still root: join the limits, then become the user
            for group in groups:
                with open(os.path.join(group, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            become()
            if folder:  # nbgrader reads the course's nbgrader_config.py from the folder it starts in
                os.chdir(folder)
        return preexec

    async def stop(self, now=False):
        await super().stop(now=now)
        for group in getattr(self, "cgroups", []):
            stop_all(group)
            remove_cgroup(group)
        self.cgroups = []


def unified(root=CGROUPS):
    """True on a machine with cgroup version 2 alone (one hierarchy for every controller)."""
    return Path(root, "cgroup.controllers").exists()


def v2_group(wanted, root=CGROUPS):
    """cgroup version 2: one group of this hub's for a server, with `wanted`'s limits (given as version 1 settings,
    as make_cgroups takes them) as cpu.max and memory.max, each where the hierarchy delegates that controller.
    Returns ([the group] or [], the controllers that hold)."""
    root = Path(root)
    if not wanted or not os.access(root, os.W_OK):
        return [], set()
    delegated = set((root / "cgroup.subtree_control").read_text().split())
    for controller in set(wanted) - delegated:
        try:  # as systemd does for its own slices; refused where processes sit in the root of a container's tree
            (root / "cgroup.subtree_control").write_text(f"+{controller}")
            delegated.add(controller)
        except OSError:
            pass
    for stale in _orphans(root, CGROUP_PREFIX):  # a killed hub's
        remove_cgroup(stale, wait=0)
    group = Path(tempfile.mkdtemp(prefix=f"{CGROUP_PREFIX}{os.getpid()}-", dir=root))
    held = set()
    if "cpu" in wanted and "cpu" in delegated:
        cpu = wanted["cpu"]
        (group / "cpu.max").write_text(f"{cpu['cpu.cfs_quota_us']} {cpu['cpu.cfs_period_us']}")
        held.add("cpu")
    if "memory" in wanted and "memory" in delegated:
        (group / "memory.max").write_text(str(wanted["memory"]["memory.limit_in_bytes"]))
        held.add("memory")
    return [str(group)], held


def stop_all(group):
    """SIGKILL every process left in a cgroup: kernels and whatever they started, after their server stopped."""
    try:
        pids = Path(group, "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
