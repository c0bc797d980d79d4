"""Diagnosing by the catalogue: the known mistake (autograder.assignments) that computes what the learner's
code computed."""
from __future__ import annotations

import inspect
import re

from autograder.checks.cases import PASSED
from autograder.checks.comparing import same_outputs
from autograder.checks.running import forward_only, memo, reference_module, reference_outcome, run, who


def mistake_outcome(exercise, mistake, case):
    """What a catalogued mistake computes on `case`, forward only."""
    if case.mistake_outcomes is not None:
        return case.mistake_outcomes[mistake.name]
    return memo(case, ("mistake", who(exercise), mistake.impl),
                lambda: run(exercise, mistake.impl, forward_only(case), reference_module(exercise, case)))


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
        if hits > best_hits and _right_where_the_learner_is(exercise, mistake, failed):
            best, best_hits = mistake, hits
    return best


def _right_where_the_learner_is(exercise, mistake, failed):
    """Whether the mistake computes the reference's outcome on every public case the learner's code passed (PASSED, where
    the driver says which): a mistake that goes wrong where the learner is right is no name for the learner's code either
    (len(keys) reads B, keys.size(1) reads h: the same on a case where B = h, told apart on one where they differ)."""
    for case in PASSED.get() or ():
        if case.hidden or case.raises is not None:
            continue
        want, _ = reference_outcome(exercise, case)
        if not same_outputs(mistake_outcome(exercise, mistake, case), want):
            return False
    return True


def quoted(mistake):
    """The attributes the mistake's edit writes that its sentence quotes (".T" of "k.T reverses every axis", the edit
    writing keys.T): what a learner's code must show for the sentence to be about it. Worked out from the edit, or
    shipped with the sentence where the edit is not (the student distribution: autograder.ship)."""
    if getattr(mistake, "edit", None) is None:
        return tuple(mistake.quotes)
    added = set()
    for old, new, _ in mistake.edit.steps:
        added |= set(re.findall(r"\.\w+\b", new)) - set(re.findall(r"\.\w+\b", old))
    return tuple(sorted(a for a in added if re.search(re.escape(a) + r"\b", mistake.says)))


def quotes_unwritten(mistake, impl, source=None):
    """Whether the mistake's sentence quotes an attribute (`quoted`) that the learner's own source shows is not there
    (q @ k.transpose(1, 2)): then the sentence names a construct the learner did not write. The source is `source`
    (the grader reads it from the submission) or `impl`'s; where neither is at hand, the sentence stands."""
    attributes = quoted(mistake)
    if not attributes or (impl is None and source is None):
        return False
    try:
        source = source or getattr(impl, "__mutant_source__", None) or inspect.getsource(impl)
    except (OSError, TypeError):
        return False
    return any(not re.search(re.escape(a) + r"\b", source) for a in attributes)
