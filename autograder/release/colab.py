"""Colab and Binder: the repository's address, and the two cells that open every notebook.

REPOSITORY is the one place that names where the course lives; the Colab and
Binder links and the Colab install cell are all made from it. A class that
works from a fork changes REPOSITORY, then runs

    python -m autograder.release.colab        # rewrite the two cells of every solutions/ notebook
    python -m autograder release      # and carry them into notebooks/

Both commands are idempotent. The cells, at the top of each notebook:

- a markdown cell with an "Open in Colab" badge for the student notebook;
- just above the setup cell, a code cell that, on Colab only, installs the
  course's code (`autograder`, `solutions_lib`) from the repository, pinning
  torch to the build Colab already has so that pip never replaces it, unless
  that build is older than the oldest the course is tested with (pyproject's
  floor). Anywhere else (JupyterLab, Binder, JupyterHub, nbgrader) it does nothing.
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import nbformat

from autograder.course import assignments, find_root

REPOSITORY = "https://github.com/seqcourse/seqcourse"
BRANCH = "main"
PACKAGE = "seqcourse"

BADGE_CELL_ID = "colab-badge"
INSTALL_CELL_ID = "colab-install"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"


def _github_path():
    prefix = "https://github.com/"
    if not REPOSITORY.startswith(prefix):
        raise ValueError(f"REPOSITORY must be a GitHub address, not {REPOSITORY}")
    return REPOSITORY[len(prefix):].rstrip("/")


def colab_url(name):
    """Where Colab opens the student notebook `name` (for example 05_self_attention)."""
    return f"https://colab.research.google.com/github/{_github_path()}/blob/{BRANCH}/notebooks/{name}/{name}.ipynb"


def binder_url():
    """mybinder.org for the repository, opening JupyterLab on notebooks/."""
    return f"https://mybinder.org/v2/gh/{_github_path()}/{BRANCH}?urlpath=lab/tree/notebooks"


def install_requirement():
    """What pip installs on Colab: the course package, from the repository."""
    return f"{PACKAGE} @ git+{REPOSITORY}@{BRANCH}"


def badge_source(name):
    return f"[![Open In Colab]({COLAB_BADGE})]({colab_url(name)})"


def torch_floor():
    """The oldest torch the course is tested with: pyproject.toml's `torch>=X`."""
    with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    return next(d.split(">=")[1] for d in deps if d.startswith("torch>="))


def install_source():
    floor = torch_floor()
    major_minor = tuple(int(n) for n in floor.split(".")[:2])
    return "\n".join([
        "# On Colab only: install the course's code from its repository, keeping Colab's own",
        f"# torch when it is one the course is tested with ({floor} or newer).",
        "# Anywhere else this cell does nothing.",
        "import sys",
        "",
        'if "google.colab" in sys.modules:',
        "    import importlib.metadata, subprocess",
        "",
        '    installed = importlib.metadata.version("torch")',
        f'    tested = tuple(int(n) for n in installed.split("+")[0].split(".")[:2]) >= {major_minor}',
        f'    wanted = f"torch=={{installed}}" if tested else "torch>={floor}"',
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q",',
        f'                    "{install_requirement()}", wanted], check=True)',
    ])


def add_colab_cells(nb, name):
    """Put the badge cell first and the install cell before the first code cell; returns nb.

    Cells left by an earlier run (found by their ids) are replaced, so running
    this again changes nothing.
    """
    cells = [c for c in nb.cells if c.get("id") not in (BADGE_CELL_ID, INSTALL_CELL_ID)]
    badge = nbformat.v4.new_markdown_cell(badge_source(name), id=BADGE_CELL_ID)
    install = nbformat.v4.new_code_cell(install_source(), id=INSTALL_CELL_ID)
    first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
    nb.cells = [badge] + cells[:first_code] + [install] + cells[first_code:]
    return nb


def update_solutions(root, names=None):
    """Add or refresh the two cells in solutions/NN_name/NN_name.ipynb; returns the notebooks changed."""
    root = Path(root)
    changed = []
    for name in names or assignments(root):
        path = root / "solutions" / name / f"{name}.ipynb"
        before = path.read_text(encoding="utf-8")
        nb = add_colab_cells(nbformat.reads(before, as_version=4), name)
        after = nbformat.writes(nb)
        after += "" if after.endswith("\n") else "\n"  # as nbformat.write does
        if after != before:
            path.write_text(after, encoding="utf-8")
            changed.append(name)
    return changed


def main(argv=None):
    names = list(sys.argv[1:] if argv is None else argv)
    changed = update_solutions(find_root(), names or None)
    print(f"Colab cells updated in {len(changed)} notebook(s){': ' + ', '.join(changed) if changed else ''}.")
    if changed:
        print("Now run `python -m autograder release` to carry them into notebooks/.")


if __name__ == "__main__":
    main()
