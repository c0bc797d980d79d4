"""nbgrader through its Python API, with the course's nbgrader_config.py: what releasing
(autograder.release) and grading (autograder.grading) both do with it."""
from __future__ import annotations

import os
import shutil
import tempfile
from importlib.metadata import version
from pathlib import Path

from traitlets.config.loader import PyFileConfigLoader

from autograder.course import cache_dir, sqlite_url, tool_env


def load_config(config_dir):
    """The traitlets Config of the course's nbgrader_config.py in `config_dir`."""
    return PyFileConfigLoader("nbgrader_config.py", path=str(config_dir)).load_config()


def api_for(config_dir, **course_settings):
    """An NbGraderAPI with the course's nbgrader_config.py and these CourseDirectory settings."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    os.environ.update(tool_env())  # nbgrader runs `alembic` and kernels from PATH
    config = load_config(config_dir)
    for key, value in course_settings.items():
        setattr(config.CourseDirectory, key, value)
    coursedir = CourseDirectory(config=config)
    return NbGraderAPI(coursedir=coursedir, config=config)


def generate_assignments(root, names, release_dir, db):
    """`nbgrader generate_assignment` for each name; returns {name: (ok, log)}."""
    api = api_for(root, root=str(root), release_directory=str(release_dir), db_url=sqlite_url(db))
    if not Path(db).exists():
        shutil.copy(empty_gradebook(root, api.coursedir.course_id), db)
    out = {}
    for name in names:
        result = api.generate_assignment(name, force=True, create=True)
        out[name] = (result["success"], result.get("log", "") + result.get("error", ""))
    return out


def empty_gradebook(root, course_id):
    """A gradebook with no assignment in it, made once per nbgrader version and course id under root's .autograder/
    (cache_dir).
    A new gradebook is a copy of it: nbgrader makes each new one by running `alembic heads` in a process of its own,
    a second or two each time, and grading makes several."""
    from nbgrader.api import Gradebook

    path = cache_dir(root) / "gradebooks" / f"empty-{version('nbgrader')}-{course_id.encode().hex()[:64]}.db"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            Gradebook(sqlite_url(Path(tmp) / "empty.db"), course_id=course_id).close()
            os.replace(Path(tmp) / "empty.db", path)  # atomic: two graders that made it at once both get a whole one
    return path
