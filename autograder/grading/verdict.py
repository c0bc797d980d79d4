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
import contextlib
import dataclasses
import io
import sys
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
                ref = core.reference_module(ex, case)
                blob = io.BytesIO()
                torch.save(core.portable_call(case.make()), blob)
                cases.append((blob.getvalue(), case.grad, ref.state_dict() if ref is not None else None))
            exercises[ex.name] = {"kind": ex.kind, "train_mode": ex.train_mode, "state_after": ex.state_after,
                                  "depends_on": tuple(ex.depends_on), "cases": cases}
        buf = io.BytesIO()
        torch.save(exercises, buf)
        _cases[notebook] = buf.getvalue()
    return _cases[notebook]


def sent_back(cell):
    """(the outcomes a test cell sent, the earlier exercises its code used), the last sending counting;
    or (None, why there are none)."""
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
    if not (isinstance(data, dict) and isinstance(data.get("outcomes"), list) and isinstance(data.get("used"), list)):
        return None, "its results could not be read (not what a check sends)"
    return ([core.outcome_from_plain(d) for d in data["outcomes"]], {str(u) for u in data["used"]}), ""


def verdict(ex, cell, earlier=None):
    """(Report or None, reason when None) for exercise `ex` from its test cell's outputs;
    `earlier` holds the Reports of the notebook's exercises checked before it."""
    sent, why = sent_back(cell)
    if sent is None:
        return None, why
    outcomes, used = sent
    n = len(ex.cases())
    return judge(ex, (outcomes + [core.Outcome(error=RuntimeError("this case was not run"))] * n)[:n], earlier or {}, used), ""


def judge(ex, outcomes, earlier, used=()):
    """The Report of `ex` on the learner's outcomes of its cases. One mistake is charged once: when the
    learner's `ex` used (`used`) earlier exercises of the notebook that failed with a known mistake, it
    is also compared with the reference built on those mistakes, and keeps the better score."""
    with warnings.catch_warnings():  # a catalogued mistake may warn; the learner's feedback shows none of it
        warnings.simplefilter("ignore")
        report = core.check_exercise(ex, None, hidden=True, outcomes=outcomes)
        mistakes = known_mistakes(ex, {name: r for name, r in earlier.items() if name in used or name not in ex.depends_on})
        if report.fraction < 1 and mistakes:
            other = core.check_exercise(built_on(ex, mistakes), None, hidden=True, outcomes=outcomes)
            # the comparison that takes in the earlier mistakes the learner's code ran on is the truer one
            if other.score > report.score or other.score == report.score and named(other):
                other.exercise, other.through = ex, tuple(sorted(mistakes))
                return other
    return report


def named(report):
    """Whether a Report names a catalogued mistake for its first failure."""
    failures = report.failures()
    return bool(failures and failures[0].diagnosis)


def known_mistakes(ex, earlier):
    """{exercise: Mistake} that explain every failure among the exercises `ex` uses, or {} when one has
    failed in a way no known mistake explains."""
    found = {}
    for name in ex.depends_on:
        report = earlier.get(name)
        if report is None or report.fraction == 1.0 and not report.through:
            continue
        if report.through:  # judged on mistakes further back: they are in this one's code too
            found |= known_mistakes(report.exercise, earlier)
        if report.fraction == 1.0:
            continue
        says = report.failures()[0].diagnosis
        mistake = next((m for m in report.exercise.mistakes if says and m.says == says), None)
        if mistake is None:
            return {}
        found[name] = mistake
    return found


def built_on(ex, mistakes):
    """`ex` with the reference's results on each case computed with these mistakes in place of the
    exercises it uses, from the weights the learner's module started from (an error, too, is a result);
    its own catalogued mistakes are run on the same footing, so that one of them is still named."""
    cases = []
    for case in ex.cases():
        ref = core.reference_module(ex, case)
        weights = ref.state_dict() if ref is not None else None
        call = case.make()  # the very inputs the learner's code got: made before the mistakes go in
        with mistakes_in_place(mistakes):
            want = core.run_call(ex.kind, ex.train_mode, ex.reference, call, case.grad, weights, None, ex.state_after)
            own = {m.name: core.run_call(ex.kind, ex.train_mode, m.impl, case.make(), False, weights, None, ex.state_after)
                   for m in ex.mistakes}
        cases.append(dataclasses.replace(case, expected=want, weights=weights, mistake_outcomes=own))
    return dataclasses.replace(ex, cases=lambda: cases)


@contextlib.contextmanager
def mistakes_in_place(mistakes):
    """The reference, for a while, with earlier exercises replaced by these mistakes wherever it uses them."""
    undo = []
    for module in [m for name, m in list(sys.modules.items()) if name.split(".")[0] == "solutions_lib" and m]:
        for name, mistake in mistakes.items():
            obj = vars(module).get(name)
            if obj is not None and getattr(obj, "__module__", "").startswith("solutions_lib"):
                undo.append((module, name, obj))
                setattr(module, name, mistake.impl)
    try:
        yield
    finally:
        for module, name, obj in undo:
            setattr(module, name, obj)


def grade_test_cells(nb):
    """Write every check cell's outputs from the grader's own comparison."""
    passed, reports = {}, {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        name = meta.get("grade_id", "").removeprefix("check_")
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution") or not name:
            continue
        try:
            ex = registry.get(name)
        except KeyError:
            continue  # not one of the course's checks: nbgrader grades it as it ran
        report, why = verdict(ex, cell, reports)
        if report is None:
            passed[name] = False
            data = {"exercise": name, "score": 0.0, "points": ex.points, "status": "error", "reason": f"{name}: {why}"}
            lines = [f"✘ {name}: {why}"]
        else:
            passed[name], reports[name] = report.fraction == 1.0, report
            lines, reason = explain(report, passed)
            data = result_data(report, reason)
        cell.outputs = [new_output("stream", name="stdout", text="\n".join(lines) + "\n"),
                        new_output("display_data", data={RESULT_MIME: data, "text/plain": ""})]
        if data["score"] == 0:
            cell.outputs.append(new_output("error", ename="CheckFailed", evalue=data["reason"], traceback=[lines[0]]))
        elif data["score"] < ex.points:
            cell.outputs.append(new_output("execute_result", data={"text/plain": repr(data["score"])}, execution_count=cell.get("execution_count")))
    return nb
