"""`python -m autograder.release.site`: the course as a static HTML site, to read without running anything.

Every notebook becomes a page: the solution notebook run from top to bottom, with its
outputs and figures, but with each solution cell's code replaced by the stub a learner
starts from (the released notebook's cell of the same grade_id). The hints stay collapsed
`<details>` blocks; the Colab badge stays; the Colab install cell and the cells about the
repository's own commands go, as in a class's distribution. Sphinx and myst-nb write the
HTML (pip install -e ".[site]"); nothing is fetched while building.

    python -m autograder.release.site                       # execute every solutions/ notebook (teaching runs)
    COURSE_SITE_QUICK=1 python -m autograder.release.site   # the same on the grading budget: minutes
    python -m autograder.release.site --executed DIR        # take DIR/NN_name/NN_name.ipynb, already executed
    python -m autograder.release.site --out DIR             # write the HTML to DIR (default site/_build/html)
"""
from __future__ import annotations

import argparse
import html
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from autograder.api import RESULT_MIME
from autograder.course import CourseError, assignments, find_root, tool_env
from autograder.release import is_solution, colab, release
from autograder.release.student_dist import student_notebook

TITLE = "Sequence models in PyTorch: from recurrence to a GPT of your own"
DESCRIPTION = (
    "An open, autograded Jupyter course: one function at a time, from recurrent networks to attention "
    "and a Transformer you train yourself.\n"
    "Each page is a notebook run from top to bottom, with its outputs and figures but without the "
    f"solutions: open it in Colab (the badge atop the page) or [get the course]({colab.REPOSITORY}) to do the exercises."
)
CELL_TIMEOUT = 1800  # seconds per cell; a teaching run's training cell takes a minute or two on a CPU
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

CONF = f"""\
project = {TITLE!r}
html_title = {TITLE!r}
extensions = ["myst_nb"]
nb_execution_mode = "off"  # the notebooks come executed
nb_ipywidgets_js = {{}}  # no widget scripts from a CDN: progress bars are text (site.py)
myst_enable_extensions = ["dollarmath", "amsmath"]
html_theme = "sphinx_book_theme"
html_theme_options = {{"repository_url": {colab.REPOSITORY!r}, "use_repository_button": True,
                      "use_download_button": False, "footer_content_items": []}}
html_context = {{"default_mode": "auto"}}
html_show_sourcelink = html_copy_source = False
suppress_warnings = ["image.nonlocal_uri", "myst.header"]
"""


def execute(root, name, quick=False, timeout=CELL_TIMEOUT):
    """solutions/NAME/NAME.ipynb run in a fresh kernel, in a temporary copy of its folder; returns the notebook."""
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    env = tool_env()
    if quick:
        env["NBGRADER_EXECUTION"] = "autograde"  # course_lib.runtime.grading(): the grading budget
    with tempfile.TemporaryDirectory() as tmp:
        folder = shutil.copytree(Path(root) / "solutions" / name, Path(tmp) / name)
        nb = nbformat.read(folder / f"{name}.ipynb", as_version=4)
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(tmp) / "kernel"))  # no TCP port
        try:
            NotebookClient(nb, km=km, timeout=timeout, resources={"metadata": {"path": str(folder)}}).execute(env=env)
        except CellExecutionError as e:
            raise CourseError(f"solutions/{name}/{name}.ipynb failed while executing:\n{str(e)[-3000:]}") from None
        finally:
            if km.has_kernel:
                km.shutdown_kernel(now=True)
    return nb


def read_executed(folder, name):
    """DIR/NAME/NAME.ipynb, checked to be executed."""
    path = Path(folder) / name / f"{name}.ipynb"
    if not path.is_file():
        raise CourseError(f"no executed notebook {path}: put {name}'s executed notebook there (a complete submission "
                          f"after `python -m autograder grade`, from COURSE/autograded/STUDENT/), or leave out "
                          f"--executed to execute solutions/{name} here")
    nb = nbformat.read(path, as_version=4)
    if not any(c.get("execution_count") for c in nb.cells if c.cell_type == "code"):
        raise CourseError(f"{path} has never been executed: no code cell has run")
    return nb


def hide_solutions(nb, released, name):
    """The page's notebook: each solution cell's source replaced by the released stub (its outputs kept),
    without the cells a class does not get, with the Colab badge on top and progress bars as text."""
    stubs = {c.metadata["nbgrader"]["grade_id"]: c.source for c in released.cells if is_solution(c)}
    nb = student_notebook(nb)
    for cell in nb.cells:
        if is_solution(cell):
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            if grade_id not in stubs:
                raise CourseError(f"{name}: the solution cell {grade_id!r} is not in the released notebook")
            cell.source = stubs[grade_id]
        if "### BEGIN SOLUTION" in cell.source:
            raise CourseError(f"{name}: a cell that is not a solution cell holds solution code:\n{cell.source[:500]}")
        if "outputs" in cell:  # without a check's result for the grader: the text above it says the same
            cell.outputs = [out for out in cell.outputs if RESULT_MIME not in out.get("data", {})]
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(colab.badge_source(name)))
    widgets_as_text(nb)
    return nb


def widgets_as_text(nb):
    """Replace tqdm's progress-bar widgets by the text of their final state (the widget scripts are not shipped)."""
    state = nb.metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})

    def text(model_id):
        model = state.get(model_id, {})
        values = model.get("state", {})
        if model.get("model_name") == "FloatProgressModel" and values.get("max"):
            filled = round(10 * values.get("value", 0) / values["max"])
            return "|" + "█" * filled + " " * (10 - filled) + "|"
        if "children" in values:
            return "".join(text(child.removeprefix("IPY_MODEL_")) for child in values["children"])
        return html.unescape(str(values.get("value", ""))).replace("\u2007", " ")

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            view = out.get("data", {}).pop(WIDGET_VIEW, None)
            if view and view.get("model_id") in state:
                out["data"]["text/plain"] = text(view["model_id"])


def index_page(names):
    """The front page: title, description, and the notebooks in order (Sphinx titles each by its first heading)."""
    toctree = "\n".join(names)
    return f"# {TITLE}\n\n{DESCRIPTION}\n\n```{{toctree}}\n:maxdepth: 1\n\n{toctree}\n```\n"


def build(root=None, executed=None, out=None, quick=None, released=None, names=None):
    """Write the site into `out` (default site/_build/html); returns the path of its index.html.

    executed: a folder of executed notebooks (DIR/NN_name/NN_name.ipynb); default: execute solutions/ here.
    released: a folder of released notebooks (default: released now, into a temporary folder).
    """
    try:
        from sphinx.cmd.build import build_main
        import myst_nb  # noqa: F401
    except ImportError as e:
        raise CourseError(f"{e.name} is missing: pip install -e '.[site]' (`make site` installs it)") from None

    root = Path(root) if root else find_root()
    out = Path(out) if out else root / "site" / "_build" / "html"
    names = names or assignments(root)
    quick = os.environ.get("COURSE_SITE_QUICK") == "1" if quick is None else quick
    if executed is not None:
        missing = [n for n in names if not (Path(executed) / n / f"{n}.ipynb").is_file()]
        if missing:
            read_executed(executed, missing[0])  # names the path, and how to make it
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        if released is None:
            print("releasing the notebooks, for the stubs that replace the solutions…", flush=True)
            released = release(root, dest=Path(tmp) / "released", names=names, examples=False)
        bar = tqdm(names, desc="notebooks", unit="notebook")
        for name in bar:
            bar.set_postfix_str(name)
            if executed is None:
                bar.write(f"executing solutions/{name}/{name}.ipynb ({'quick' if quick else 'teaching'} run)…")
                nb = execute(root, name, quick=quick)
            else:
                nb = read_executed(executed, name)
            stub = nbformat.read(Path(released) / name / f"{name}.ipynb", as_version=4)
            nbformat.write(hide_solutions(nb, stub, name), src / f"{name}.ipynb")
        bar.close()
        (src / "index.md").write_text(index_page(names), encoding="utf-8")
        (src / "conf.py").write_text(CONF, encoding="utf-8")
        print(f"building the HTML with Sphinx into {out}…", flush=True)
        if build_main(["-b", "html", "-q", "-E", "-d", str(Path(tmp) / "doctrees"), str(src), str(out)]):
            raise CourseError("Sphinx could not build the site (its messages are above)")
    return out / "index.html"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder.release.site", description=__doc__.splitlines()[0],
                                     epilog="COURSE_SITE_QUICK=1 runs the notebooks on the grading budget.")
    parser.add_argument("--executed", metavar="DIR", help="take the executed notebooks from DIR/NN_name/NN_name.ipynb "
                        "instead of executing solutions/")
    parser.add_argument("--out", metavar="DIR", help="where the HTML goes (default: site/_build/html)")
    args = parser.parse_args(argv)
    try:
        index = build(executed=args.executed, out=args.out)
    except CourseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        index = index.relative_to(Path.cwd())
    except ValueError:
        pass
    print(f"site ready: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
