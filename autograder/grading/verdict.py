"""Grading on the grader's side of the sandbox: the cases sent in, and the verdict on what came back.

`cases_for(notebook)` is the file the sandbox gets: every case's inputs (hidden
ones included) and the weights module exercises start from, never an expected
output. After the notebook ran, `grade_test_cells` reads what each test cell
sent back (autograder.record, in autograder.wire's bounded format), compares it
with the reference here, where the learner's code never ran, and writes the
cell's outputs from that comparison alone, all within a time limit: nbgrader's
SaveAutoGrades then takes the score from them.
"""
from __future__ import annotations

import base64
import io
import re
import warnings

import torch
from nbformat.v4 import new_output

from autograder.checks import comparing, driver, running, travel
from autograder.checks.cases import DEVICE, Outcome
from autograder import registry, ship, wire
from autograder.course import cache_dir, keep
from autograder.api import RESULT_MIME, explain, result_data
from autograder.checks.charging import charged_once
from autograder.record import MIME

_cases = {}


def cases_for(notebook):
    """The bytes of the cases file of `notebook` (autograder.record reads it in the sandbox)."""
    if notebook not in _cases:
        exercises = {}
        for ex in registry.for_notebook(notebook):
            cases = []
            for case in ex.cases():
                ref = running.reference_module(ex, case)
                blob = io.BytesIO()
                torch.save(travel.portable_call(case.make()), blob)
                cases.append((blob.getvalue(), case.grad, ref.state_dict() if ref is not None else None))
            exercises[ex.name] = {"kind": ex.kind, "train_mode": ex.train_mode, "state_after": ex.state_after,
                                  "depends_on": tuple(ex.depends_on), "cases": cases,
                                  "on_meta": any(case.part == DEVICE for case in ex.cases())}
        buf = io.BytesIO()
        torch.save(exercises, buf)
        _cases[notebook] = buf.getvalue()
    return _cases[notebook]


def prepare(root, name):
    """The cases file of notebook `name` (cases_for), and the reference's outcome on each of its cases, hidden ones too,
    kept in the grader's cache (autograder.course.cache_dir, never in a sandbox's view) under the version of the course's
    code (ship.fingerprint): computed by the first grading process of that version, read by the others, which then run
    the reference only where a diagnosis needs it (its cases on the meta device alone load torch._dynamo, 2 s of CPU)."""
    if name in _cases:
        return _cases[name]
    path = cache_dir(root) / "grading" / f"{name}-{ship.fingerprint(root, name)}.pt"
    exercises = registry.for_notebook(name)
    try:
        data = torch.load(path, weights_only=False)  # written by this user's grader (cache_dir is no one else's)
        kept = [(ex, case, found) for ex in exercises for case, found in zip(ex.cases(), data["outcomes"][ex.name], strict=True)]
    except Exception:  # not there yet, or unreadable (a disk that filled up): computed again
        return _computed(path, name, exercises)
    for ex, case, found in kept:
        if found is not None:
            case.memo.setdefault(("reference", running.who(ex)), found)
    _cases[name] = data["cases"]
    return _cases[name]


def _computed(path, name, exercises):
    outcomes = {ex.name: [_storable(*running.reference_outcome(ex, case)) for case in ex.cases()] for ex in exercises}
    blob = io.BytesIO()
    torch.save({"cases": cases_for(name), "outcomes": outcomes}, blob)
    keep(path, blob.getvalue(), f"{name}-*.pt")
    return _cases[name]


def _storable(want, weights):
    """(outcome, weights) as the cache keeps them (ship's portable form), or None where that form is not the same."""
    kept = ship.portable(want)
    same = comparing.same_value(kept.outputs, want.outputs) and comparing.same_value(kept.grads, want.grads)
    return (kept, weights) if same and type(kept.error) is type(want.error) else None


def sent_back(cell, max_bytes):
    """(the outcomes a test cell sent, the earlier exercises its code used, its outcomes with those
    answered by the reference or None), the last sending counting; or (None, why there are none)."""
    blobs = [o["data"][MIME] for o in cell.get("outputs", []) if MIME in o.get("data", {})]
    if not blobs:
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            return None, f"the check did not run: {errors[-1].get('ename')}: {errors[-1].get('evalue', '')}".strip()[:300]
        return None, "the check did not run (was `check` replaced, or the cell changed?)"
    try:
        if not isinstance(blobs[-1], str) or len(blobs[-1]) > max_bytes * 4 // 3 + 4:
            raise wire.WireError("too large")
        data = wire.decode(base64.b64decode(blobs[-1], validate=True), max_bytes)
    except (ValueError, TypeError) as e:  # whatever the learner's code wrote there: plain values only, bounded
        return None, f"its results could not be read ({type(e).__name__})"
    if not (isinstance(data, dict) and isinstance(data.get("outcomes"), list) and isinstance(data.get("used"), list)
            and (data.get("replayed") is None or isinstance(data["replayed"], list))):
        return None, "its results could not be read (not what a check sends)"
    replayed = data.get("replayed")
    return ([travel.outcome_from_plain(d) for d in data["outcomes"]], {str(u) for u in data["used"]},
            None if replayed is None else [travel.outcome_from_plain(d) for d in replayed]), ""


def verdict(ex, cell, earlier=None, max_bytes=64 * 2**20, source=None):
    """(Report or None, reason when None) for exercise `ex` from its test cell's outputs;
    `earlier` holds the Reports of the notebook's exercises checked before it; `source`, the learner's
    code of `ex` (learner_source), so that no sentence names a construct that code does not have."""
    sent, why = sent_back(cell, max_bytes)
    if sent is None:
        return None, why
    outcomes, used, replayed = sent
    try:
        return judge(ex, _padded(ex, outcomes), earlier or {}, used, replayed and _padded(ex, replayed), source), ""
    except Exception as e:  # results no check sends, that the comparison cannot take: that cell's 0, never the notebook's
        return None, f"its results could not be compared ({type(e).__name__})"


def _padded(ex, outcomes):
    n = len(ex.cases())
    return (outcomes + [Outcome(error=RuntimeError("this case was not run"))] * n)[:n]


def judge(ex, outcomes, earlier, used=(), replayed=None, source=None):
    """The Report of `ex` on the learner's outcomes of its cases. One mistake is charged once: when
    the learner's `ex` used earlier exercises of the notebook that are wrong, it is also judged on
    `replayed`, its outcomes with those exercises answered by the reference (autograder.grading.replay),
    and keeps the better report (autograder.checks.charging, which `check` in a notebook uses too).
    So it earns its points on its own code, and only on it."""
    with warnings.catch_warnings():  # a catalogued mistake may warn; the learner's feedback shows none of it
        warnings.simplefilter("ignore")
        report = driver.check_exercise(ex, None, hidden=True, outcomes=outcomes, source=source)
        return charged_once(ex, report, earlier, used, None if replayed is None else lambda: replayed, source=source)


class OutOfTime(BaseException):
    """The grader's comparison took longer than its limit (BaseException: nothing on the way catches it)."""


def grade_test_cells(nb, seconds=None, max_bytes=64 * 2**20, known=None):
    """Write every check cell's outputs from the grader's own comparison, all of it within `seconds`;
    `known` holds {cell index: (Report or None, why)} already judged from the same outputs."""
    known = known or {}
    passed, reports, late = {}, {}, None
    try:
        with running.time_limit(seconds, OutOfTime()):
            for index, cell in enumerate(nb.cells):
                ex = exercise_of(cell)
                if ex is None:
                    continue
                report, why = known[index] if index in known else verdict(ex, cell, reports, max_bytes, learner_source(nb, ex.name))
                if report is not None:
                    reports[ex.name] = report
                _write(cell, ex, report, passed, why)
    except OutOfTime:
        late = f"the grader's comparison did not finish within its {seconds:g} s"
    for cell in nb.cells if late else []:
        ex = exercise_of(cell)
        if ex is not None and ex.name not in passed:
            _write(cell, ex, None, passed, why=late)
    return nb


def learner_source(nb, name, most=100_000):
    """The text of the learner's cells that define `name` (def name( or class name), or None: what a check
    may quote of their code. The learner wrote it: it is only searched, never run or parsed."""
    found = [c.get("source", "") for c in getattr(nb, "cells", []) if c.get("cell_type") == "code"
             and isinstance(c.get("source"), str) and len(c["source"]) <= most
             and re.search(rf"^\s*(def|class)\s+{re.escape(name)}\b", c["source"], re.M)]
    return "\n".join(found) or None


def exercise_of(cell):
    """The course's exercise a check cell checks, or None for any other cell."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    name = meta.get("grade_id", "").removeprefix("check_")
    if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution") or not name:
        return None
    try:
        return registry.get(name)
    except KeyError:
        return None  # not one of the course's checks: nbgrader grades it as it ran


def _write(cell, ex, report, passed, why=""):
    name = ex.name
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
