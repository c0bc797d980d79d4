"""`python -m autograder release --student-dist DIR`: what an instructor hands to a class.

    DIR/notebooks/NN_name/NN_name.ipynb   the released notebooks
    DIR/autograder/                       the check machinery (api, core, the `check` command),
                                          with autograder/data/NN_name.pt in place of the reference
    DIR/course_lib/                       what the notebooks import, as in the repository
    DIR/pyproject.toml, DIR/README.md     `pip install DIR`, and how to install and use it
    DIR/install.py                        the install, with PyTorch's CPU build on Linux without an NVIDIA GPU

Left out: solutions/, solutions_lib (the reference), autograder.assignments (the
mistake catalogs and every hidden case), and the instructor's commands. Each
check cell still gives the feedback it gives in the repository on the public
cases: the release command runs the reference and every catalogued mistake on
them once and stores the results (autograder.ship, autograder.reference_data),
which autograder.registry reads where the catalogs are absent.
"""
from __future__ import annotations

import json
import re
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


# What the notebooks' text offers that only the full repository has, and what a class reads instead: `reveal`
# prints the reference solution, which a class's distribution does not ship (there it only says so).
REWRITES = [
    (re.compile(r"Still stuck, and working on your own\? `reveal\(\"name\"\)` prints the reference solution[^\n]*?"
                r"than a finished answer does\."),
     "Still stuck? Ask your instructor: the reference solutions are not part of this distribution."),
]


# The repository's folders that a class's distribution does not ship: a notebook names their files by an address only.
REPOSITORY_ONLY = ("solutions", "benchmarks", "docs", "tests", "deploy", "examples")


def student_notebook(nb):
    """The released notebook without the cells that open or install the repository, or speak of its
    commands (tagged "repository-only"), and with the text's offers of what only the repository has
    rewritten (REWRITES)."""
    nb = nbformat.from_dict(nb)
    nb.cells = [cell for cell in nb.cells if cell.get("id") not in _repository_cells()
                and "repository-only" not in cell.get("metadata", {}).get("tags", [])]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for pattern, instead in REWRITES:
                cell.source = pattern.sub(instead, cell.source)
    return nb


def not_shipped(nb, dest, folder):
    """What the text of notebook `nb` (to be written into `folder` of the distribution `dest`) names that `dest`
    does not hold: `reveal(`, the reference (solutions_lib), a file of the repository's own folders (REPOSITORY_ONLY)
    but by an address, a `python -m` module, a relative link.
    [(cell index, what)]; code cells may import reveal (it says there that the solutions are not shipped)."""
    dest, folder, found = Path(dest), Path(folder), []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        text = cell.source
        found += [(i, f"{word}: not in the student distribution") for word in ("reveal(", "solutions_lib") if word in text]
        prose = re.sub(r"\[[^\]]*\]\([a-z][a-z0-9+.-]*:[^)]*\)|https?://\S+", "", text)  # links to an address work anywhere
        found += [(i, f"{path}: not in the student distribution")
                  for path in re.findall(rf"(?<![\w/.-])(?:{'|'.join(REPOSITORY_ONLY)})/[\w./-]*", prose)]
        for module in re.findall(r"(?:python3? |torchrun [^`\n]*?)-m ([A-Za-z_][\w.]*)", text):
            path = dest.joinpath(*module.split("."))
            if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()):
                found.append((i, f"python -m {module}: not in the student distribution"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:|#", target):  # an address (https:, attachment:) or this notebook's anchor
                continue
            if not (folder / target.split("#")[0]).exists():
                found.append((i, f"a link to {target}: not in the student distribution"))
    return found


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
    (dest / "README.md").write_text(README.replace("{torch}", torch_requirement(root)))
    (dest / "install.py").write_text(INSTALL.replace("{torch}", torch_requirement(root)))
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
            nb = student_notebook(nbformat.read(Path(tmp) / name / f"{name}.ipynb", as_version=4))
            missing = not_shipped(nb, dest, out.parent)
            if missing:
                raise CourseError(f"{name}'s text names what the student distribution does not hold (tag the cell "
                                  "repository-only, or rewrite it in student_dist.REWRITES):\n"
                                  + "\n".join(f"  cell {i}: {what}" for i, what in missing))
            nbformat.write(nb, out)
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


def torch_requirement(root):
    """The course's requirement on torch ("torch>=2.13.0"), which the install's CPU line asks for too."""
    return next(d for d in runtime_dependencies(root) if re.match(r"torch\b", d))



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

Install once, from this folder, into a fresh virtual environment (`python -m venv .venv`,
then `source .venv/bin/activate`; on Windows `.venv\\Scripts\\activate`):

    python install.py

It runs `pip install -e ".[check]"`, and first, on Linux without an NVIDIA GPU (no
`nvidia-smi`), installs PyTorch's CPU build from PyTorch's own index:

    pip install "{torch}" --index-url https://download.pytorch.org/whl/cpu

PyPI's torch for Linux is the CUDA build, which brings NVIDIA's CUDA libraries that a
CPU cannot use. On macOS and Windows PyPI's torch is already a CPU build (with Apple's
MPS on a Mac), and with an NVIDIA GPU the CUDA build is the one you want: there
`install.py` installs from PyPI only. By hand: the line above (only on Linux without a
GPU), then `pip install -e ".[check]"`; `python install.py --dry-run` prints the commands.

Size: on Linux (x86-64, Python 3.11) without a GPU the environment took 1.4 GB, torch
754 MB of it (`du -sh` of a fresh virtual environment after installing torch 2.13.0's
CPU build, then `pip install -e ".[check]"` from this folder).

Then open a notebook in `notebooks/` (JupyterLab, VS Code, Colab), run the cells,
and replace each `raise NotImplementedError()` with your code. The check cell
under each exercise prints `✔` with the points, or says which case failed, by
how much, and the likely mistake. To grade a whole notebook in a fresh kernel:

    python -m autograder check notebooks/05_self_attention/05_self_attention.ipynb

`course_lib` holds what the notebooks import: data, plots, and ready-made
building blocks from earlier notebooks. Your instructor grades your notebook
on more cases than these checks show.
"""

INSTALL = """\
\"\"\"Install the notebooks and their checks into the Python that runs this file (README.md):

    python install.py             # pip install -e ".[check]", with PyTorch's CPU build on Linux without an NVIDIA GPU
    python install.py --dry-run   # print the commands, run nothing

PyPI's torch for Linux is the CUDA build, with NVIDIA's CUDA libraries, of no use without an NVIDIA GPU: there
(no nvidia-smi) torch comes from PyTorch's CPU index first. PyPI's torch for macOS and Windows is a CPU build
already, and with an NVIDIA GPU the CUDA build is wanted: there everything comes from PyPI.
\"\"\"
import platform
import shutil
import subprocess
import sys
from pathlib import Path

TORCH = "{torch}"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def commands(system=None, gpu=None):
    \"\"\"The pip commands for this machine: `system` as platform.system() names it, `gpu` whether nvidia-smi is found.\"\"\"
    system = platform.system() if system is None else system
    gpu = shutil.which("nvidia-smi") is not None if gpu is None else gpu
    pip = [sys.executable, "-m", "pip", "install"]
    cpu_torch = [pip + [TORCH, "--index-url", CPU_INDEX]] if system == "Linux" and not gpu else []
    return cpu_torch + [pip + ["-e", ".[check]"]]


def main(argv):
    dry = "--dry-run" in argv
    for command in commands():
        print("$ python", " ".join(f'"{word}"' if set(word) & set(" [>") else word for word in command[1:]), flush=True)
        if not dry:
            subprocess.run(command, check=True, cwd=Path(__file__).resolve().parent)


if __name__ == "__main__":
    main(sys.argv[1:])
"""
