"""Each user's server, started as that user in their role's environment and under the class's limits; the trial login.

A student's server starts in cgroups of its own (CPU, memory, processes; autograder/hub/cgroups.py) with
RLIMIT_NPROC, behind a wall (autograder/hub/wall.py) on her own disk (autograder/hub/disks.py), and when it stops,
every process it left is killed and its groups removed, or the hub's log says which group could not be.
"""
from __future__ import annotations

import hmac
import os
import pwd
import resource

from jupyterhub.auth import Authenticator
from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer, Unicode

from autograder.hub import cgroups, wall
from autograder.hub.classroom import Classroom

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
        self.cgroups, self.nproc = [], None
        # a student's server reads no configuration from her home (JupyterHub's own switch): her JupyterLab settings
        # stay hers, but what her server serves and loads is the class's
        self.disable_user_config = role == "student"
        if role == "student":  # the instructor grades: J sandboxes of their own, each with its own limits
            if not room.disk_note and not room.volumes.limited(self.user.name):
                raise RuntimeError(f"{self.user.name}'s disk is not mounted: run make hub again, which mounts it")
            self.cgroups, self.nproc = self._limits(), self.pids_limit
            self.cmd = [*wall.argv(room, self.user.name, self.cgroups, self.mem_limit), server]
        else:
            self.cmd = [server]
        return await super().start()

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

        def preexec():  # in the child, still root: join the limits, then become the user
            for group in groups:
                with open(os.path.join(group, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            if nproc:  # the user's processes on the whole machine, counted by the kernel even where no pids cgroup is
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            become()
            if folder:  # nbgrader reads the course's nbgrader_config.py from the folder it starts in
                os.chdir(folder)
        return preexec

    async def stop(self, now=False):
        await super().stop(now=now)
        for group, count in cgroups.end(getattr(self, "cgroups", [])):
            self.log.error("%s's server stopped, but its cgroup %s could not be removed: %d processes are still in it",
                           self.user.name, group, count)
        self.cgroups = []
