"""JupyterLab for a student or an instructor: `make lab`, `make lab-instructor`.

    python -m autograder.lab student [FOLDER] [jupyter lab options]      # FOLDER: notebooks/
    python -m autograder.lab instructor [FOLDER] [jupyter lab options]   # FOLDER: the course

Students keep nbgrader's assignment list and "Validate" button, without the
instructor's formgrader, course list and create-assignment tools; instructors
get all of them. The choice is made for this run only: JUPYTER_CONFIG_PATH
points at jupyter-config/<role>/ (a labconfig/page_config.json that disables or
enables nbgrader's lab plugins, a jupyter_server_config.json for its server
extensions), so the user's own Jupyter configuration is left as it is.
Binder's `start` script uses jupyter-config/student/ the same way.

An instructor's lab never runs a student's code with the instructor's rights, since a
submission runs only in grading's sandbox: jupyter-config/instructor has the server's
kernels (`InstructorKernels`) and nbgrader's Validate's (`InstructorKernel`) started by
`safe_start`, none in a folder holding a submission and none importing from the folder it
starts in (a `torch.py` handed in beside a notebook); and the server itself runs with
PYTHONSAFEPATH, for whatever else it starts.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web

from autograder.course import find_root
from autograder.grading import intake

ROLES = ("student", "instructor")
DEFAULT_FOLDER = {"student": "notebooks", "instructor": "."}
SAFE_PATH = {"PYTHONSAFEPATH": "1"}  # no folder of a script's or the working one on sys.path, from Python 3.11 on
# IPython puts '' on sys.path as a kernel starts, unless told not to (before 9.7 even under PYTHONSAFEPATH)
IGNORE_CWD = "--InteractiveShellApp.ignore_cwd=True"
# the folders of an nbgrader course that hold students' work (CourseDirectory's names, which nbgrader_config.py keeps)
SUBMISSION_FOLDERS = ("submitted", "autograded", "feedback")
# what lies in a submission's own folder: nbgrader's submit and collect leave the first, the course's Collect its notes
SUBMISSION_MARKS = (*intake.NBGRADER_FILES, *intake.RESERVED)
SANDBOX_ONLY = "Submissions run only in grading's sandbox: python -m autograder grade COURSE"


def config_dir(role, root):
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    return Path(root) / "jupyter-config" / role


def lab_env(role, root, env=None):
    """`env` (default: this process's) with jupyter-config/<role> first on JUPYTER_CONFIG_PATH; an instructor's
    also with SAFE_PATH, for everything the server starts (kernels, nbgrader's Validate, a terminal's python)."""
    env = dict(os.environ if env is None else env)
    paths = [str(config_dir(role, root).resolve())]
    paths += [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p and p not in paths]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(paths)
    return env | SAFE_PATH if role == "instructor" else env


def submission_at(folder):
    """'' when a kernel may start in `folder`; else why not: it, or a folder above it, is a course's submitted/,
    autograded/ or feedback/, or holds what a submission's folder holds (SUBMISSION_MARKS)."""
    folder = Path(folder).resolve()
    for here in (folder, *folder.parents):
        if here.name in SUBMISSION_FOLDERS or any(os.path.lexists(here / mark) for mark in SUBMISSION_MARKS):
            return f"{SANDBOX_ONLY}. No kernel starts in {folder}: it holds students' work ({here})."
    return ""


def safe_start(folder, kwargs, ipython):
    """The arguments `kwargs` of starting a kernel in `folder`, with SAFE_PATH, and IGNORE_CWD for an IPython kernel;
    PermissionError where no kernel starts (`submission_at`)."""
    why = submission_at(folder)
    if why:
        raise PermissionError(why)
    extra = [*kwargs.get("extra_arguments", []), *([IGNORE_CWD] if ipython else [])]
    return kwargs | {"env": {**kwargs.get("env", os.environ), **SAFE_PATH}, "extra_arguments": extra}


def _ipython(argv):
    """Whether a kernel spec's command line runs ipykernel, which takes IGNORE_CWD."""
    return any("ipykernel" in arg for arg in argv)


class Refused(web.HTTPError):
    """A kernel not started, and why: the kernels API answers 403 with the reason, the sessions API (JupyterLab opening
    a notebook) 500 with str() of it, which is the reason alone."""

    def __str__(self):
        return self.log_message


class InstructorKernels(AsyncMappingKernelManager):
    """The kernels of an instructor's Jupyter server (jupyter-config/instructor's jupyter_server_config.json names this
    class), started by `safe_start` however the server itself was (make hub, Kubernetes); where none may start, the
    server says why (`Refused`), and JupyterLab shows it."""

    async def start_kernel(self, *, kernel_id=None, path=None, **kwargs):
        if kernel_id is None or kernel_id not in self:
            folder = self.cwd_for_path(path) if path is not None else os.getcwd()
            try:
                kwargs = safe_start(folder, kwargs, self._runs_ipython(kwargs.get("kernel_name")))
            except PermissionError as e:
                self.log.warning("%s", e)
                raise Refused(403, str(e)) from None
        return await super().start_kernel(kernel_id=kernel_id, path=path, **kwargs)

    def _runs_ipython(self, kernel_name):
        try:
            return _ipython(self.kernel_spec_manager.get_kernel_spec(kernel_name or self.default_kernel_name).argv)
        except Exception:  # noqa: BLE001 (no such kernel: starting it fails and says so)
            return False


class InstructorKernel(AsyncKernelManager):
    """A kernel nbclient starts in an instructor's server, for nbgrader's Validate (jupyter-config/instructor's
    nbgrader_config.json names this class), started by `safe_start`: Validate runs no submission."""

    async def start_kernel(self, **kwargs):
        kwargs = safe_start(kwargs.get("cwd") or os.getcwd(), kwargs, _ipython(self.kernel_spec.argv))
        return await super().start_kernel(**kwargs)


def lab_command(folder, options=()):
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={Path(folder).resolve()}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in options:
        cmd.append("--allow-root")  # a container, CI
    return cmd + list(options)


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ROLES:
        sys.exit(f"usage: python -m autograder.lab {{{'|'.join(ROLES)}}} [FOLDER] [jupyter lab options]")
    role, args = args[0], args[1:]
    root = find_root()
    folder = args.pop(0) if args and not args[0].startswith("-") else str(root / DEFAULT_FOLDER[role])
    cmd = lab_command(folder, args)
    os.execve(cmd[0], cmd, lab_env(role, root))


if __name__ == "__main__":
    main()
