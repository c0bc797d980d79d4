"""The checks of the student distribution, read from answers the release command computed.

The student distribution (`python -m autograder release --student-dist DIR`,
built by autograder.release.student_dist) ships neither the reference implementation
nor the assignment modules with their mistake catalogs and hidden cases. For
each notebook it ships instead autograder/data/NN_name.pt, a dict

    {"format": 6, "exercises": [exercise, ...]}

where an exercise holds the Exercise's fields (name, points, parts, kind,
returns, depends_on, train_mode, state_after, notebook), its catalogued
mistakes as (name, sentence, the attributes the sentence quotes of its edit: autograder.checks.catalogue.quoted),
and its public cases, each with

    label, part, grad
    raises     the exception class the text requires on these inputs, or None
    call       the case's inputs, pickled as bytes ({"call": Call, "grads": [(tensor, its .grad)]}):
               every run loads a fresh copy
    expected   the reference's Outcome (outputs and gradients)
    weights    for a module exercise, the state dict the learner's module starts from
    mistakes   {mistake name: that mistake's forward-only Outcome}
    variants   {name: (sentence, Outcome)}: the reference on changed inputs (autograder.checks.variants)
    edits      {finder: {name: (sentence, Outcome)}}: the reference's own source edited, by each finder of
               autograder.checks.relations.EDIT_FINDERS ("structure.rewirings": a residual left out, ...),
               only the edits whose outcome differs from `expected` (autograder.checks.edits)

autograder.registry reads this data where the catalogs are absent: `load_all`
rebuilds each Exercise from it, with Cases whose `expected`, `weights` and
`mistake_outcomes` are set, and autograder.checks then compares and names
mistakes exactly as it does with the reference at hand. Hidden cases are
never written, so there they do not exist.
"""
import functools
import io
from pathlib import Path

import torch

from autograder.checks import travel
from autograder.checks.cases import Case, Exercise, Mistake

DATA = Path(__file__).resolve().parent / "data"
FORMAT = 6


def load_call(blob):
    """A fresh copy of a case's inputs, gradients included."""
    return travel.restored_call(torch.load(io.BytesIO(blob), weights_only=False))


def exercise_from(data):
    """An Exercise whose cases carry their precomputed reference and mistake outcomes."""
    cases = [
        Case(c["label"], functools.partial(load_call, c["call"]), c["part"], grad=c["grad"],
             expected=c["expected"], weights=c["weights"], mistake_outcomes=c["mistakes"],
             variant_outcomes=c["variants"], edit_outcomes=_edits(c["edits"]), raises=c["raises"])
        for c in data["cases"]
    ]
    return Exercise(
        data["name"], None, data["points"], functools.partial(list, cases),
        mistakes=[Mistake(name, says, None, quotes=tuple(quotes)) for name, says, quotes in data["mistakes"]],
        parts=data["parts"], kind=data["kind"], depends_on=tuple(data["depends_on"]), returns=tuple(data["returns"]),
        train_mode=data["train_mode"], state_after=data["state_after"], notebook=data["notebook"],
    )


def _edits(stored):
    """The stored edits keyed as autograder.checks.edits.edit_outcomes reads them: {(finder, name): (sentence, Outcome)}."""
    return {(finder, name): found for finder, edits in stored.items() for name, found in edits.items()}


def load_all():
    """{name: Exercise} for every notebook whose data the distribution ships."""
    found = {}
    for path in sorted(DATA.glob("*.pt")):
        data = torch.load(path, weights_only=False)
        if data.get("format") != FORMAT:
            raise RuntimeError(f"{path} was written by another version of the course; release it again")
        found |= {ex["name"]: exercise_from(ex) for ex in data["exercises"]}
    return found
