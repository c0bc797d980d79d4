"""Each user's server, started as that user in their role's environment and under the class's limits; the trial login.

A student's server starts in cgroups of its own (CPU, memory and the socket memory of her network, processes;
autograder/hub/cgroups.py) with RLIMIT_NPROC and RLIMIT_NOFILE, behind a wall (autograder/hub/wall.py) on her own
disk (autograder/hub/disks.py), in a network of its own that a relay joins to the proxy and the hub's API
(autograder/hub/relay.py). However it ends (stopped through the hub, or ended by itself: killed, out of memory),
every process it left is killed and its groups removed, or the hub's log says which group could not be.

The instructor's server runs in cgroups of its own too, with no limit but delegated to the instructor's account, so
that grading can bound each submission's sandbox inside them (autograder/grading/cgroups.py). Its Python never puts
the folder a kernel starts in on the import path (PYTHONSAFEPATH): a file a student handed in beside her notebook is
never imported by the instructor's kernels.
"""
from __future__ import annotations

import asyncio
import hmac
import os
import pwd
import resource
import subprocess
import sys
from urllib.parse import urlparse

from jupyterhub.auth import Authenticator
from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer, Unicode

from autograder.grading.cgroups import delegate
from autograder.hub import cgroups, seccomp, wall
from autograder.hub.classroom import Classroom

FILES = 4096  # RLIMIT_NOFILE of each process of a student's server: JupyterLab, a kernel and a terminal need far fewer
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
    folder; and for a student, `cpu_limit`, `mem_limit` and `pids_limit` in cgroups, and the wall."""

    state = Unicode(help="the class's state folder").tag(config=True)
    pids_limit = Integer(512, help="processes and threads a student's server may run at once, kernels included").tag(config=True)
    files_limit = Integer(FILES, help="files each process of a student's server may hold open (RLIMIT_NOFILE)").tag(config=True)

    def _room(self):
        return Classroom.load(self.state)

    def get_env(self):
        room = self._room()
        role = room.role(self.user.name)
        env = super().get_env()
        env["PATH"] = f"{room.env(role) / 'bin'}:/usr/local/bin:/usr/bin:/bin"
        env["JUPYTER_CONFIG_PATH"] = str(room.config(role))
        env.pop("PYTHONPATH", None)  # the hub's own, which could reach the reference
        if role == "student":
            env["JUPYTER_RUNTIME_DIR"] = "/tmp/jupyter-runtime"  # her private /tmp
        else:
            env["JUPYTER_RUNTIME_DIR"] = str(self._runtime(room))
            env["PYTHONSAFEPATH"] = "1"  # a kernel started beside a submission imports nothing of hers
        return env

    def _runtime(self, room):
        """The instructor's runtime folder (their kernels' sockets), made by root in the class's folder, theirs alone:
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
        server = str(room.env(role) / "bin" / "jupyterhub-singleuser")
        self.notebook_dir = str(room.course_dir) if role == "instructor" else ""
        self.default_url = "/lab"
        await self._end()  # what an earlier server of this user left, if its end went unseen
        self.cgroups, self.above, self.nproc, self.nofile, self.relay = [], [], None, None, None
        # a student's server reads no configuration from her home (JupyterHub's own switch): her JupyterLab settings
        # stay hers, but what her server serves and loads is the class's
        self.disable_user_config = role == "student"
        if role == "student":
            if not room.disk_note and not room.volumes.limited(self.user.name):
                raise RuntimeError(f"{self.user.name}'s disk is not mounted: run make hub again, which mounts it")
            self.cgroups, self.nproc, self.nofile = self._limits(), self.pids_limit, self.files_limit
            wall.mount_ptys(room, self.user.name)
            fd = seccomp.memfd()
            self.popen_kwargs = {"pass_fds": (fd,)} if fd is not None else {}
            self.cmd = [*wall.argv(room, self.user.name, self.cgroups, self.mem_limit, fd), server]
            try:
                started = await super().start()
            finally:
                if fd is not None:
                    os.close(fd)
            # her server listens in her own network: the relay is its only door to the proxy and the hub's API
            api_port = urlparse(self.hub.api_url).port
            self.relay = subprocess.Popen([sys.executable, "-m", "autograder.hub.relay", str(self.proc.pid),
                                           str(self.port), str(api_port)], stdin=subprocess.DEVNULL)
            return started
        self.cgroups, self.above = self._delegated()  # the instructor's: no limit, theirs to bound grading's sandboxes in
        self.cmd = [server]
        return await super().start()

    def _delegated(self):
        """Memory and pids groups for the instructor's server, without limits, handed to the instructor's account:
        grading makes each sandbox's groups inside them (autograder.grading.cgroups), as root would at the top.
        Returns the groups the server joins, and those it does not (version 2: a delegated group above its leaf)."""
        pw = pwd.getpwnam(self.user.name)
        made, _ = cgroups.make({"memory": {}, "pids": {}})
        joined = [delegate(group, pw.pw_uid, pw.pw_gid) for group in made]
        if not made:
            self.log.warning("%s's server has no cgroup of its own to grade in: grading will refuse to start a sandbox "
                             "it cannot bound", self.user.name)
        return joined, [group for group in made if group not in joined]

    def _limits(self):
        settings = cgroups.wanted(self.cpu_limit, self.mem_limit, self.pids_limit)
        groups, held = cgroups.make(settings)
        for group in groups:  # readable by the user's processes: the course reads its CPU quota (runtime.usable_cpus)
            os.chmod(group, 0o755)
        missing = set(settings) - held
        if missing:
            self.log.warning("%s's %s limit is not enforced: root may not make a %s cgroup under %s here", self.user.name,
                             " and ".join(sorted(missing)), " or ".join(sorted(missing)), cgroups.CGROUPS)
        return groups

    def make_preexec_fn(self, name):
        become = super().make_preexec_fn(name)
        groups, folder, nproc = list(getattr(self, "cgroups", [])), self.notebook_dir, getattr(self, "nproc", None)
        nofile = getattr(self, "nofile", None)

        def preexec():  # in the child, still root: join the limits, then become the user
            for group in groups:
                with open(os.path.join(group, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            if nproc:  # the user's processes on the whole machine, counted by the kernel even where no pids cgroup is
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            become()
            if folder:  # nbgrader reads the course's nbgrader_config.py from the folder it starts in
                os.chdir(folder)
        return preexec

    async def stop(self, now=False):
        self.stopping = True
        try:
            await super().stop(now=now)
        finally:
            self.stopping = False
        await self._end()

    async def poll(self):
        status = await super().poll()
        ended = status is not None and not getattr(self, "stopping", False)
        if ended and (getattr(self, "cgroups", None) or getattr(self, "relay", None)):
            self.log.info("%s's server ended by itself (%s): ending what it left", self.user.name, status)
            await self._end()
        return status

    async def _end(self):
        """Every process the server left killed, its relay stopped and its groups removed; a line in the hub's log
        for each group that could not be."""
        relay = getattr(self, "relay", None)
        groups = list(getattr(self, "cgroups", None) or []) + list(getattr(self, "above", None) or [])  # leaves first
        self.relay, self.cgroups, self.above = None, [], []
        if relay is not None and relay.poll() is None:
            relay.kill()
        if relay is not None:
            await asyncio.to_thread(relay.wait)
        for group, count in await asyncio.to_thread(cgroups.end, groups):
            self.log.error("%s's server stopped, but its cgroup %s could not be removed: %d processes are still in it",
                           self.user.name, group, count)
