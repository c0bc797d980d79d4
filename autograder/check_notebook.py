"""`python -m autograder check NOTEBOOK...`: run notebooks in a fresh kernel, grade them with pytest.

Each notebook is executed top to bottom once (errors do not stop it, as in
nbgrader); then pytest runs one test per graded cell, so `--junitxml` and the
usual pytest reporting work.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import nbformat

from autograder.course import CourseError, tool_env
from autograder.results import notebook_results, table

DEFAULT_CELL_TIMEOUT = 300


def execute(path, timeout=DEFAULT_CELL_TIMEOUT):
    """Run a notebook in a fresh kernel in its own folder; return the executed copy."""
    from nbclient import NotebookClient

    path = Path(path)
    try:
        nb = nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise CourseError(f"{path}: no such notebook") from None
    except Exception as e:
        raise CourseError(f"{path} is not a readable notebook ({type(e).__name__}: {e})") from None
    from jupyter_client.manager import KernelManager

    env = tool_env()
    env["AUTOGRADER_QUICK"] = "1"  # training cells use the grading budget, as under nbgrader
    old = dict(os.environ)
    os.environ.update(env)
    try:
        with tempfile.TemporaryDirectory() as sockets:
            # IPC sockets in a private folder: nothing listens on the network (and the kernel has no TCP warning)
            km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
            client = NotebookClient(
                nb,
                km=km,
                timeout=timeout,
                allow_errors=True,
                resources={"metadata": {"path": str(path.parent.resolve())}},
            )
            try:
                client.execute()
            finally:
                if km.has_kernel:
                    km.shutdown_kernel(now=True)
    finally:
        os.environ.clear()
        os.environ.update(old)
    return nb


def save_results(path, before, executed):
    """Write the executed check cells' outputs into the notebook at `path`, whose bytes were `before` when it
    ran, everything else left as it is; only if the file is still those bytes (not saved again meanwhile).
    Returns whether it wrote. The later notebooks' `yours` and `progress` read these results."""
    path = Path(path)
    if path.read_bytes() != before:
        return False
    nb = nbformat.reads(before.decode("utf-8"), as_version=4)
    if len(nb.cells) != len(executed.cells):
        return False
    for cell, ran in zip(nb.cells, executed.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            cell.outputs, cell.execution_count = ran.get("outputs", []), ran.get("execution_count")
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, suffix=".ipynb", delete=False) as f:
        nbformat.write(nb, f)
    os.chmod(f.name, path.stat().st_mode & 0o7777)
    os.replace(f.name, path)  # whole or not at all
    return True


def check(paths, junitxml=None, timeout=DEFAULT_CELL_TIMEOUT, echo=print, save=False):
    """Execute and grade each notebook; return pytest's exit code (0 = everything passed). With `save`, the
    results are also written into each notebook's check cells, as running them in Jupyter and saving would."""
    import pytest

    with tempfile.TemporaryDirectory() as tmp:
        result_files = []
        for path in paths:
            echo(f"running {path} in a fresh kernel…")
            try:
                before = Path(path).read_bytes()
            except OSError:
                before = None  # execute says why
            nb = execute(path, timeout)
            rows = notebook_results(nb)
            if not rows:
                raise CourseError(f"{path} has no graded cells")
            out = Path(tmp) / (Path(path).stem + ".results.json")
            out.write_text(json.dumps({"notebook": str(path), "rows": [r.__dict__ for r in rows]}))
            result_files.append(out)
            echo(table(rows, title=f"\n{path}"))
            for row in rows:
                if row.status != "passed" and row.lines:
                    echo("\n" + "\n".join(row.lines))
            if not save:
                echo(f"\n(not written into {Path(path).name}: add --save to keep these results in its check cells, "
                     "where the later notebooks' `yours` and `progress` read them)")
            elif save_results(path, before, nb):
                echo(f"\nsaved these results into the check cells of {path}")
            else:
                echo(f"\nnot saved: {path} changed while it ran; run the command again")
        # pytest only for its exit code and --junitxml: the table above is the report
        args = ["-p", "no:terminal", "-p", "autograder.pytest_plugin", "-p", "no:cacheprovider", "--rootdir", tmp,
                "-o", "addopts=", "-o", "testpaths="]
        if junitxml:
            args.append(f"--junitxml={Path(junitxml).resolve()}")
        return int(pytest.main(args + [str(f) for f in result_files]))
