"""What the grading sandbox shows of the course: the student side of one notebook.

`view(root, name)` is a folder holding what a class is shipped (autograder.ship)
for notebook `name` (the check machinery, its public precomputed data,
`course_lib`), less every building block of course_lib that implements one of
that notebook's own exercises. It is built once per version of the
course's code (autograder.ship.fingerprint) and kept in ROOT/.autograder/views/ (or $AUTOGRADER_CACHE/views/:
autograder.course.cache_dir).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from autograder import registry, ship
from autograder.course import cache_dir, drop_older


def view(root, name):
    """The folder the sandbox mounts as /course when it grades notebook `name` (built if needed)."""
    root = Path(root)
    dest = cache_dir(root) / "views" / f"{name}-{ship.fingerprint(root, name)}"
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=dest.parent))
    try:
        build(root, name, tmp)
        os.chmod(tmp, 0o755)
        os.rename(tmp, dest)  # atomic: a parallel worker that built it first wins, and this copy goes
    except OSError:
        if not dest.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    drop_older(dest, f"{name}-*")
    return dest


def build(root, name, dest):
    """Write the student side of notebook `name` into `dest` (an empty folder)."""
    ship.write_package(root, Path(dest), without={ex.name for ex in registry.for_notebook(name)})
    ship.write_data(dest, name, root)
    found = ship.leaks(dest)
    if found:
        raise ship.ShipError("the grading sandbox would contain reference code:\n" + "\n".join(f"  {p}: {w}" for p, w in found))
