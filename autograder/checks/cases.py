"""What a check is made of: an exercise, its cases (the inputs of one call), the catalogued mistakes that
name what a learner got wrong, and what a call came to (an Outcome) and how a case and a whole check ended
(CaseResult, Report). The lowest room of autograder.checks: nothing here runs or compares anything."""
from __future__ import annotations

import contextvars
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence


DEFAULT_TIMEOUT_S = float(os.environ.get("AUTOGRADER_CHECK_TIMEOUT", "60"))
DEVICE = "device"  # the part whose cases run on the meta device (autograder.inputs.on_the_meta_device): no values
# The cases the learner's code got right in the check being diagnosed (set by autograder.checks.driver): a name for the
# learner's code, a catalogued mistake or an edit of the reference, must get them right too. None: not known.
PASSED = contextvars.ContextVar("PASSED", default=None)


@dataclass
class Call:
    """The inputs of one case. For a module, `init` and `init_kwargs` are the constructor's arguments.

    `seed`: the call runs right after torch.manual_seed(seed), once its module is built and holds its weights, so
    that dropout in training mode draws the same masks for the reference and the learner (here and in the grading
    sandbox, where the call travels pickled, seed included: autograder.checks.travel.portable_call). `train`: the
    mode of a module exercise's module for this call, in place of the exercise's train_mode; None keeps that.
    `device`: where a module exercise's module is moved once it holds its weights ("meta" in the device cases: a
    tensor there has a shape, a dtype and a device but no values, so a CPU tells whether the code keeps to the device
    of its inputs); None leaves it where it was built. `as_built`: names of a module exercise's parameters that keep
    the values its class's constructor gave them, built right after torch.manual_seed(seed), in place of the
    reference's weights (a reference factory that randomises weights is skipped for it): what a docstring says of the
    initialisation is checked in these cases.
    """

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    init: tuple | None = None
    init_kwargs: dict = field(default_factory=dict)
    seed: int | None = None
    train: bool | None = None
    device: str | None = None
    as_built: tuple = ()


@dataclass
class Case:
    """One set of inputs. `make` builds them afresh for every call, from a fixed seed."""

    label: str
    make: Callable[[], Call]
    part: str = "main"
    hidden: bool = False
    grad: bool = True
    # Precomputed where the reference is not at hand (the student distribution,
    # autograder.reference_data): the reference's outcome, the weights a module
    # exercise starts from, and each catalogued mistake's forward-only outcome by name.
    expected: Outcome | None = None
    weights: dict | None = None
    mistake_outcomes: dict | None = None
    variant_outcomes: dict | None = None  # {name: (sentence, outcome)}: autograder.checks.variants.variant_outcomes
    edit_outcomes: dict | None = None  # {(finder, name): (sentence, outcome)}: autograder.checks.edits.edit_outcomes
    # A requirement of the exercise's text: on these inputs the code must raise this exception (its class name).
    raises: str | None = None
    # What the checks worked out on this case, kept for the next time they ask (autograder.checks.running.memo).
    memo: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass
class Mistake:
    """A known wrong implementation and the sentence that names it.

    `impl` is the wrong function or class: made by autograder.registry from an
    edit of the reference (kept in `edit`, see autograder.assignments), or
    hand-written for a mistake that no small edit expresses.
    """

    name: str
    says: str
    impl: Callable
    edit: object = None
    quotes: tuple = ()  # where there is no edit: what its sentence quotes of it (autograder.checks.catalogue.quoted)


@dataclass
class Exercise:
    name: str
    reference: Callable
    points: float
    cases: Callable[[], list]
    mistakes: Sequence[Mistake] = ()
    parts: dict | None = None  # part name -> weight; None means one part
    # "function"; "module": an nn.Module class, built with the reference's weights, then called;
    # "class": any class, built, then handed to the case's first argument, which uses it and
    # returns what it saw (autograder.fixtures.CacheSteps)
    kind: str = "function"
    depends_on: tuple = ()
    returns: tuple = ()  # names of the returned values, for messages
    train_mode: bool = False  # modules are checked in eval mode (no dropout) unless set
    # Also compare what the call changed: the parameters of every nn.Module and the
    # learning rate of every optimizer among its arguments (for a training step).
    state_after: bool = False
    notebook: str = ""

    def part_weights(self):
        return self.parts or {"main": 1.0}


class CheckTimeout(Exception):
    pass


class StudentError(Exception):
    """The learner's code raised; `original` is what it raised."""

    def __init__(self, original):
        super().__init__(f"{type(original).__name__}: {original}")
        self.original = original


class WeightMismatch(Exception):
    pass


@dataclass
class Outcome:
    outputs: tuple | None = None
    grads: dict | None = None
    error: BaseException | None = None


def raised(outcome, name):
    """Whether the outcome is an exception of class `name` or of a subclass of it (by name: it may have
    come out of the grading sandbox)."""
    return outcome.error is not None and name in [c.__name__ for c in type(outcome.error).__mro__]


@dataclass
class CaseResult:
    case: Case
    ok: bool
    problem: str = ""
    diagnosis: str = ""
    relation: str = ""  # with no diagnosis: how the learner's output relates to the reference's (autograder.checks.relations)
    not_implemented: bool = False
    timed_out: bool = False
    detail: tuple = ()  # for a failing public case: its inputs and the first entries that differ
    reference: Outcome | None = field(default=None, repr=False)  # for a failing case: the reference's outcome


@dataclass
class Report:
    exercise: Exercise
    results: list
    timed_out: bool = False
    through: tuple = ()  # earlier exercises whose known mistakes the comparison took in (autograder.grading.verdict)
    planned: tuple = None  # every case the check meant to run; None: the results are all of them

    @property
    def fraction(self):
        weights = self.exercise.part_weights()
        total = sum(weights.values())
        passed = sum(w for part, w in weights.items() if self.part_ok(part))
        return passed / total

    @property
    def score(self):
        return round(self.exercise.points * self.fraction, 4)

    def part_ok(self, part):
        """A part earns its points only when every one of its planned cases ran and matched: a check stops
        at the first stub or timeout, and the cases it never reached cannot vouch for the part. The part "device"
        runs on the meta device, which has no values: it earns its points once every other part has too."""
        rs = [r for r in self.results if r.case.part == part]
        planned = len(rs) if self.planned is None else sum(c.part == part for c in self.planned)
        ok = bool(rs) and len(rs) == planned and all(r.ok for r in rs)
        if part == DEVICE:
            return ok and all(self.part_ok(p) for p in self.exercise.part_weights() if p != part)
        return ok

    @property
    def not_implemented(self):
        return any(r.not_implemented for r in self.results)

    def failures(self):
        return [r for r in self.results if not r.ok]
