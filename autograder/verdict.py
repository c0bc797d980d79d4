"""Grading on the grader's side of the sandbox: the cases sent in, and the verdict on what came back.

`cases_for(notebook)` is the file the sandbox gets: every case's inputs (hidden
ones included) and the weights module exercises start from, never an expected
output. After the notebook ran, `grade_test_cells` reads what each test cell
sent back (autograder.record), compares it with the reference here, where the
learner's code never ran, and writes the cell's outputs from that comparison
alone: nbgrader's SaveAutoGrades then takes the score from them.
"""
from __future__ import annotations

import base64
import io
import warnings

import torch
from nbformat.v4 import new_output

from autograder import core, registry
from autograder.api import RESULT_MIME, explain, result_data
from autograder.record import MAX_BYTES, MIME

_cases = {}


def cases_for(notebook):
    """The bytes of the cases file of `notebook` (autograder.record reads it in the sandbox)."""
    if notebook not in _cases:
        exercises = {}
        for ex in registry.for_notebook(notebook):
            cases = []
            for case in ex.cases():
                ref = core._reference_module(ex, case)
                blob = io.BytesIO()
                torch.save(core.portable_call(case.make()), blob)
                cases.append((blob.getvalue(), case.grad, ref.state_dict() if ref is not None else None))
            exercises[ex.name] = {"kind": ex.kind, "train_mode": ex.train_mode, "state_after": ex.state_after, "cases": cases}
        buf = io.BytesIO()
        torch.save(exercises, buf)
        _cases[notebook] = buf.getvalue()
    return _cases[notebook]


def sent_back(cell):
    """The outcomes a test cell sent (the last sending counts), or (None, why there are none)."""
    blobs = [o["data"][MIME] for o in cell.get("outputs", []) if MIME in o.get("data", {})]
    if not blobs:
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            return None, f"the check did not run: {errors[-1].get('ename')}: {errors[-1].get('evalue', '')}".strip()
        return None, "the check did not run (was `check` replaced, or the cell changed?)"
    try:
        if len(blobs[-1]) > MAX_BYTES * 4 // 3 + 4:
            raise ValueError("too large")
        data = torch.load(io.BytesIO(base64.b64decode(blobs[-1], validate=True)), weights_only=True)
    except Exception as e:  # whatever the learner's code wrote there: weights_only runs none of it
        return None, f"its results could not be read ({type(e).__name__})"
    if not isinstance(data, list):
        return None, "its results could not be read (not a list)"
    return [core.outcome_from_plain(d) for d in data], ""


def verdict(ex, cell):
    """(Report or None, reason when None) for exercise `ex` from its test cell's outputs."""
    outcomes, why = sent_back(cell)
    if outcomes is None:
        return None, why
    n = len(ex.cases())
    outcomes = (outcomes + [core.Outcome(error=RuntimeError("this case was not run"))] * n)[:n]
    with warnings.catch_warnings():  # a catalogued mistake may warn; the learner's feedback shows none of it
        warnings.simplefilter("ignore")
        return core.check_exercise(ex, None, hidden=True, outcomes=outcomes), ""


def grade_test_cells(nb):
    """Write every check cell's outputs from the grader's own comparison."""
    passed = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        name = meta.get("grade_id", "").removeprefix("check_")
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution") or not name:
            continue
        try:
            ex = registry.get(name)
        except KeyError:
            continue  # not one of the course's checks: nbgrader grades it as it ran
        report, why = verdict(ex, cell)
        if report is None:
            passed[name] = False
            data = {"exercise": name, "score": 0.0, "points": ex.points, "status": "error", "reason": f"{name}: {why}"}
            lines = [f"✘ {name}: {why}"]
        else:
            passed[name] = report.fraction == 1.0
            lines, reason = explain(report, passed)
            data = result_data(report, reason)
        cell.outputs = [new_output("stream", name="stdout", text="\n".join(lines) + "\n"),
                        new_output("display_data", data={RESULT_MIME: data, "text/plain": ""})]
        if data["score"] == 0:
            cell.outputs.append(new_output("error", ename="CheckFailed", evalue=data["reason"], traceback=[lines[0]]))
        elif data["score"] < ex.points:
            cell.outputs.append(new_output("execute_result", data={"text/plain": repr(data["score"])}, execution_count=cell.get("execution_count")))
    return nb
