"""One mistake is charged once. An exercise that uses earlier exercises of its notebook, when one of those it used
is wrong, is judged on its outcomes with them answered by the reference too (autograder.grading.replay serves the
answers), and keeps the better Report: it earns its points on its own code, and only on it. The grader
(autograder.grading.verdict) and `check` in a notebook (autograder.api) both decide here."""
from __future__ import annotations

from autograder.checks.driver import check_exercise


def own_right(report):
    """Whether an exercise's own code, with what it uses, gave the reference's results."""
    return report is not None and report.fraction == 1.0 and not report.through


def named(report):
    """Whether a Report names a catalogued mistake for its first failure."""
    failures = report.failures()
    return bool(failures and failures[0].diagnosis)


def charged_once(ex, report, earlier, used, replay, hidden=True, source=None):
    """The Report `ex` gets: `report`, its Report on the learner's own outcomes; or, when the learner's `ex` used
    (`used`) earlier exercises that are wrong (their Reports in `earlier`), its Report on `replay()` (its outcomes
    with those exercises answered by the reference), if that is better. `source`: the learner's code, as
    check_exercise takes it."""
    wrong = tuple(d for d in ex.depends_on if d in used and not own_right(earlier.get(d)))
    if report.fraction < 1 and wrong and replay is not None:
        outcomes = replay()
        if outcomes is not None:
            other = check_exercise(ex, None, hidden=hidden, outcomes=outcomes, source=source)
            if other.score > report.score or other.score == report.score and named(other) and not named(report):
                other.through = wrong
                return other
    return report
