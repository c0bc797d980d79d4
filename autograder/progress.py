"""`python -m autograder progress [FOLDER]`: what a learner has done, read from their saved notebooks.

Nothing is run: each check cell keeps the result of its last run in the
notebook (autograder.api publishes it), so saving the notebook is enough.
A check cell that was never run, or whose output was cleared, counts as not run.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from autograder.api import RESULT_MIME, points_text

NAME = re.compile(r"^\d\d_\w+\.ipynb$")


def check_cells(nb):
    """[(exercise, points, published result or None)] for each check cell of a notebook (a dict)."""
    found = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        result = next((o["data"][RESULT_MIME] for o in cell.get("outputs", []) if RESULT_MIME in o.get("data", {})), None)
        found.append((meta.get("grade_id", "?").removeprefix("check_"), float(meta.get("points", 0)), result))
    return found


def notebooks(folder):
    """The course notebooks under `folder`, by name (checkpoints left out)."""
    folder = Path(folder)
    if folder.is_file():
        return [folder]
    return sorted((p for p in folder.rglob("*.ipynb") if NAME.match(p.name) and ".ipynb_checkpoints" not in p.parts),
                  key=lambda p: (p.name, str(p)))


def summary(path):
    """(exercises passed, exercises, points earned, points, what is next) for one notebook."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"cannot be read ({type(e).__name__})"
    cells = check_cells(nb)
    passed = sum(1 for _, _, r in cells if r and r["status"] == "passed")
    earned = sum(r["score"] for _, _, r in cells if r)
    points = sum(p for _, p, _ in cells)
    todo = next(((name, r) for name, _, r in cells if not r or r["status"] != "passed"), None)
    if todo is None:
        nxt = "done" if cells else "no checks"
    else:
        name, r = todo
        nxt = f"{name}: " + ("not run yet" if r is None else r["status"] if r["status"] == "not implemented" else
                             f"{r['status']}, {points_text(r['score'])}/{points_text(r['points'])}")
    return (passed, len(cells), earned, points), nxt


def progress(folder="."):
    """The table `python -m autograder progress` prints."""
    paths = notebooks(folder)
    if not paths:
        return f"no course notebooks (NN_name.ipynb) under {Path(folder).resolve()}"
    width = max(len(p.stem) for p in paths)
    lines = [f"{'notebook':<{width}}  {'exercises':>9}  {'points':>12}  next"]
    total = [0.0, 0.0]
    for path in paths:
        counts, nxt = summary(path)
        if counts is None:
            lines.append(f"{path.stem:<{width}}  {'':>9}  {'':>12}  {nxt}")
            continue
        passed, n, earned, points = counts
        total[0] += earned
        total[1] += points
        lines.append(f"{path.stem:<{width}}  {passed:>4} / {n:<2}  {points_text(earned):>6} / {points_text(points):<3}  {nxt}")
    lines.append(f"{'total':<{width}}  {'':>9}  {points_text(total[0]):>6} / {points_text(total[1]):<3}")
    if any(line.endswith(": not run yet") for line in lines):
        lines.append(NOT_RUN)
    return "\n".join(lines)


NOT_RUN = ("(\"not run yet\": no result saved in that check cell. Run its check cells in Jupyter and save the notebook, "
           "or `python -m autograder check --save NOTEBOOK`: without --save it grades but writes nothing into the notebook)")
