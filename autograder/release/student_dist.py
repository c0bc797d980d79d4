"""`python -m autograder release --student-dist DIR`: what an instructor hands to a class.

    DIR/notebooks/NN_name/NN_name.ipynb   the released notebooks
    DIR/autograder/                       the check machinery (api, core, the `check` command),
                                          with autograder/data/NN_name.pt in place of the reference
    DIR/course_lib/                       what the notebooks import, as in the repository
    DIR/pyproject.toml, DIR/README.md     `pip install DIR`, and how to use it

Left out: solutions/, solutions_lib (the reference), autograder.assignments (the
mistake catalogs and every hidden case), and the instructor's commands. Each
check cell still gives the feedback it gives in the repository on the public
cases: the release command runs the reference and every catalogued mistake on
them once and stores the results (autograder.ship, autograder.reference_data),
which autograder.registry reads where the catalogs are absent.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
import tomllib
from pathlib import Path

import nbformat

from autograder.course import CourseError, assignments
from autograder.release import colab, release
from autograder.ship import ShipError, leaks, write_data, write_package


# ---------------------------------------------------------------- notebooks


def _repository_cells():
    """Ids of the cells that open or install the course repository (autograder.release.colab): not for a class."""
    return {colab.BADGE_CELL_ID, colab.INSTALL_CELL_ID}


def student_notebook(nb):
    """The released notebook without the cells that open or install the repository, or speak of its
    commands (tagged "repository-only")."""
    nb = nbformat.from_dict(nb)
    nb.cells = [cell for cell in nb.cells if cell.get("id") not in _repository_cells()
                and "repository-only" not in cell.get("metadata", {}).get("tags", [])]
    return nb


# ---------------------------------------------------------------- building it


def build(root, dest, names=None, force=False, echo=print):
    """Write the student distribution of `names` (default: every notebook) into `dest`.
    Returns the notebooks it holds; a notebook that cannot be shipped is left out with a message."""
    root, dest = Path(root), Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        if not force:
            raise CourseError(f"{dest} exists and is not empty; name a new folder, or add --force to replace it")
        if any((dest / marker).exists() for marker in (".git", "nbgrader_config.py", "solutions")):
            raise CourseError(f"{dest} holds a course repository or a git checkout; --force will not delete it")
        shutil.rmtree(dest) if dest.is_dir() else dest.unlink()
    names = names or assignments(root)
    echo(f"releasing {len(names)} notebook(s)…")
    write_package(root, dest)
    (dest / "pyproject.toml").write_text(PYPROJECT.replace("{dependencies}", json.dumps(runtime_dependencies(root))))
    (dest / "README.md").write_text(README)
    shipped = []
    with tempfile.TemporaryDirectory() as tmp:
        release(root, dest=tmp, names=names, examples=False)
        for name in names:
            start = time.perf_counter()
            try:
                data = write_data(dest, name, root)
            except ShipError as e:
                echo(f"  left out {name}: {e}")
                continue
            out = dest / "notebooks" / name / f"{name}.ipynb"
            out.parent.mkdir(parents=True)
            nbformat.write(student_notebook(nbformat.read(Path(tmp) / name / f"{name}.ipynb", as_version=4)), out)
            shipped.append(name)
            n_cases = sum(len(ex["cases"]) for ex in data["exercises"])
            echo(f"  {name}: {len(data['exercises'])} exercises, {n_cases} public cases checked in advance ({time.perf_counter() - start:.1f} s)")
    found = leaks(dest)
    if found:
        raise CourseError("the student distribution would contain reference code:\n" + "\n".join(f"  {p}: {w}" for p, w in found))
    echo(f"student distribution of {len(shipped)} notebook(s) in {dest}")
    return shipped


def runtime_dependencies(root):
    """The course package's own dependencies (pyproject.toml), which the distribution shares."""
    with open(Path(root) / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["dependencies"]



PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "seqcourse-student"
version = "0.1.0"
description = "Sequence models in PyTorch: the notebooks and their checks"
requires-python = ">=3.11"
dependencies = {dependencies}

[project.optional-dependencies]
# for `python -m autograder check NOTEBOOK` (the checks inside a notebook need none of these)
check = ["nbgrader>=0.9", "nbclient", "nbformat", "pytest", "ipykernel"]

[tool.setuptools.packages.find]
include = ["autograder*", "course_lib*"]

[tool.setuptools.package-data]
autograder = ["data/*.pt"]
course_lib = ["data/*"]
"""

README = """\
# Sequence models in PyTorch: the notebooks

Install once, from this folder:

    pip install -e ".[check]"

Then open a notebook in `notebooks/` (JupyterLab, VS Code, Colab), run the cells,
and replace each `raise NotImplementedError()` with your code. The check cell
under each exercise prints `✔` with the points, or says which case failed, by
how much, and the likely mistake. To grade a whole notebook in a fresh kernel:

    python -m autograder check notebooks/05_self_attention/05_self_attention.ipynb

`course_lib` holds what the notebooks import: data, plots, and ready-made
building blocks from earlier notebooks. Your instructor grades your notebook
on more cases than these checks show.
"""
