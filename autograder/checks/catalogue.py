"""Diagnosing by the catalogue: the known mistake (autograder.assignments) that computes what the learner's
code computed."""
from __future__ import annotations

from autograder.checks.comparing import same_outputs
from autograder.checks.running import forward_only, reference_module, run


def mistake_outcome(exercise, mistake, case):
    """What a catalogued mistake computes on `case`, forward only."""
    if case.mistake_outcomes is not None:
        return case.mistake_outcomes[mistake.name]
    return run(exercise, mistake.impl, forward_only(case), reference_module(exercise, case))


def diagnose(exercise, failed):
    """The known mistake that reproduces the learner's output on the most failed cases, the first among
    them: the one the learner is shown (a mistake that is right where the learner is wrong is no name for it).

    `failed` is a list of (case, learner's outcome). Ties go to the mistake
    listed first in the catalog.
    """
    best, best_hits = None, 0
    for mistake in exercise.mistakes:
        hits = 0
        for i, (case, outcome) in enumerate(failed):
            same = same_outputs(outcome, mistake_outcome(exercise, mistake, case))
            if i == 0 and not same:
                break
            hits += same
        if hits > best_hits:
            best, best_hits = mistake, hits
    return best
