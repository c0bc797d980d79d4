"""Where the course lives on disk, and running nbgrader on it."""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path


class CourseError(Exception):
    """A problem the user can fix; the command line prints it without a traceback."""


def find_root(start=None):
    """The course repository: the folder holding nbgrader_config.py and solutions/."""
    candidates = [Path(start or os.getcwd()).resolve()]
    candidates += list(candidates[0].parents)
    candidates.append(Path(__file__).resolve().parent.parent)  # an editable install
    for folder in candidates:
        if (folder / "nbgrader_config.py").is_file() and (folder / "solutions").is_dir():
            return folder
    raise CourseError(
        "could not find the course repository (a folder with nbgrader_config.py and solutions/); "
        "run this command from inside it"
    )


def assignments(root):
    """Assignment names, in course order: the folders NN_name of solutions/."""
    folder = Path(root) / "solutions"
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name[:2].isdigit() and (p / f"{p.name}.ipynb").is_file())


CACHE = "AUTOGRADER_CACHE"


def cache_dir(root):
    """Where what is built from the course's code is kept (each notebook's checks computed in advance, the sandbox's
    views, gradebook templates), each under a name that says all it depends on: root/.autograder, or the folder
    $AUTOGRADER_CACHE names, which copies of the same code then share. That folder must be this user's alone: every
    sandbox mounts what is kept there."""
    named = os.environ.get(CACHE)
    if not named:
        return Path(root) / ".autograder"
    folder = Path(named)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise CourseError(f"{CACHE}={named} is not this user's alone (it must be owned by you and writable by no one "
                          "else): every grading sandbox mounts what is kept there")
    return folder


def keep(path, blob, pattern):
    """Write `blob` to `path` in cache_dir whole or not at all (another process computing the same writes the same),
    then drop the other versions that `pattern` finds beside it (drop_older)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(blob)
    os.replace(tmp, path)
    drop_older(path, pattern)


def drop_older(kept, pattern):
    """Remove what `pattern` finds beside `kept` (the other versions of something kept in cache_dir), but only in a
    course's own root/.autograder: a cache that $AUTOGRADER_CACHE names is shared, and copies of other code may be
    reading theirs."""
    if os.environ.get(CACHE):
        return
    for old in Path(kept).parent.glob(pattern):
        if old != Path(kept):
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)


def tool_env():
    """Environment for nbgrader and kernels: this interpreter's scripts first on PATH."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.pop("NBGRADER_EXECUTION", None)
    return env


def sqlite_url(path):
    return "sqlite:///" + str(Path(path).resolve())


def digest(paths):
    """A hash of some files' names (as bytes: a name need not be UTF-8) and contents."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(os.fsencode(p.name))
        h.update(p.read_bytes())
    return h.hexdigest()
