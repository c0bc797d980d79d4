"""`check`, the one call a test cell makes.

    check("scaled_dot_product_attention", scaled_dot_product_attention)

Full marks: prints a line. Nothing right: raises CheckFailed (the notebook
shows why). Some parts right: prints the points and why. Under grading the
score is not the learner's kernel's to say: autograder.grading.verdict writes it.
"""
from __future__ import annotations

import contextlib
import sys
import warnings

from autograder import record, registry
from autograder.checks.cases import DEVICE
from autograder.checks.driver import check_exercise

RESULT_MIME = "application/vnd.seqcourse.check+json"

# Outcome of each exercise checked in this kernel, to point at a broken dependency.
_passed = {}


class CheckFailed(AssertionError):
    """Raised by a test cell whose exercise earned no points."""

    def __init__(self, reason, lines):
        super().__init__(reason)
        self.lines = lines

    def _render_traceback_(self):
        # IPython shows these lines instead of a traceback into the autograder.
        return ["\x1b[0;31mCheckFailed\x1b[0m: " + self.lines[0]] + self.lines[1:]


def check(name, obj):
    """Compare the learner's `obj` with the reference exercise `name`.

    Under grading, the comparison happens outside the sandbox the notebook runs in:
    this only hands the grader what `obj` computes (autograder.record).
    """
    if record.grading():
        return record.record(name, obj)
    exercise = registry.get(name)
    with _quiet_stderr():
        report = check_exercise(exercise, obj)
    _passed[name] = report.fraction == 1.0
    lines, reason = explain(report, _passed)
    _publish(report, reason, lines)
    if report.fraction == 1.0:
        print(lines[0])
        return None
    if report.fraction == 0.0:
        raise CheckFailed(reason, lines)
    print("\n".join(lines))
    return None


@contextlib.contextmanager
def _quiet_stderr():
    # nbgrader zeroes a test cell that writes to stderr, so a harmless warning
    # from the learner's code is shown on stdout instead.
    def show(message, category, filename, lineno, file=None, line=None):
        print(f"warning: {category.__name__}: {message}", file=sys.stdout)

    with warnings.catch_warnings():
        warnings.simplefilter("once")
        warnings.showwarning = show
        with contextlib.redirect_stderr(sys.stdout):
            yield


def explain(report, passed):
    """(the lines a test cell prints, the one-line reason) for a Report; `passed` says which
    exercises of the notebook have passed so far, to point at a broken one this one uses."""
    ex = report.exercise
    n = len(report.results)
    if report.fraction == 1.0:
        what = "outputs and gradients match" if any(r.case.grad for r in report.results) else "outputs match"
        lines = [f"✔ {ex.name}: {_pts(ex.points)}/{_pts(ex.points)} points, {n} cases: {what}."]
        if report.through:
            lines.append(f"  It is right on its own: it was checked with the reference's answers in place of your "
                         f"{', '.join(report.through)}, which costs points there only. Fix that, and this works as it is.")
        return lines, ""
    if report.not_implemented:
        reason = f"{ex.name} is not implemented yet"
        return [f"✘ {reason} (the stub still raises NotImplementedError)."], reason
    first = report.failures()[0]
    if first.case.hidden:  # say that it failed, never what the hidden inputs or outputs were
        reason = f"{ex.name}: a hidden case: your result differs from the reference"
    else:
        reason = f"{ex.name}: case [{first.case.label}]: {first.problem}"
    broken = [d for d in ex.depends_on if passed.get(d) is False]
    if first.diagnosis:
        reason += f". Likely mistake: {first.diagnosis}"
    elif first.relation:
        reason += f". {first.relation}"
    if broken and not first.diagnosis:
        reason += f"{'' if first.relation else '.'} It uses your {', '.join(broken)}, which has not passed its check yet: fix that first (a grader checks this one with the reference's answers in its place, and charges that mistake once)."
    lines = [f"✘ {reason}" if report.fraction == 0 else f"◐ {ex.name}: {_pts(report.score)}/{_pts(ex.points)} points"]
    if report.fraction > 0:
        lines.append(f"  ✘ {reason}")
    lines += [f"    {line}" for line in first.detail]
    for part in ex.part_weights():
        mark = "✔" if report.part_ok(part) else "✘"
        if len(ex.part_weights()) > 1:
            lines.append(f"  {mark} part: {part}" + (_device_part(report) if part == DEVICE else ""))
    if broken and first.diagnosis:
        lines.append(f"  Note: this exercise uses {', '.join(broken)}, which has not passed its check yet; fix that first.")
    return lines, reason


def _device_part(report):
    """What the part "device" means, in a learner's words: its cases hand the code inputs on another device than the
    CPU (PyTorch's meta device, which has shapes but no values), as a GPU would."""
    cases = [r for r in report.results if r.case.part == DEVICE]
    if report.part_ok(DEVICE) or not cases:
        return ""
    if all(r.ok for r in cases):
        return (" (its cases ran right: every tensor your code makes follows its inputs to their device; "
                "these points count once the other parts pass)")
    return (" (its cases hand your code inputs that are not on the CPU, as on a GPU: a tensor your code makes without "
            "device= lands on the CPU, away from them, and on a GPU using the two together raises; make each with "
            "device=x.device, x one of the inputs)")


def points_text(x):
    """Points as a learner reads them: a whole number as it is, a share of the parts to at most two decimals (7/3 is
    2.33, never 2.3333)."""
    return f"{round(float(x) + 0.0, 2) + 0.0:g}"


_pts = points_text


def _publish(report, reason, lines):
    """Attach a machine-readable result to the cell, for `python -m autograder check`."""
    if "IPython" not in sys.modules:
        return
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is None:
        return
    display({RESULT_MIME: result_data(report, reason, lines), "text/plain": ""}, raw=True)


def result_data(report, reason, lines=()):
    """The machine-readable result of a check (autograder.results reads it back)."""
    return {
        "lines": list(lines),
        "exercise": report.exercise.name,
        "score": report.score,
        "points": report.exercise.points,
        "status": "passed" if report.fraction == 1 else "not implemented" if report.not_implemented else "failed",
        "reason": reason,
        "through": list(report.through),  # checked with the reference's answers in place of these (charged_once)
    }
