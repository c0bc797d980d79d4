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
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from autograder.course import find_root

ROLES = ("student", "instructor")
DEFAULT_FOLDER = {"student": "notebooks", "instructor": "."}


def config_dir(role, root):
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    return Path(root) / "jupyter-config" / role


def lab_env(role, root, env=None):
    """`env` (default: this process's) with jupyter-config/<role> first on JUPYTER_CONFIG_PATH."""
    env = dict(os.environ if env is None else env)
    paths = [str(config_dir(role, root).resolve())]
    paths += [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p and p not in paths]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(paths)
    return env


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
