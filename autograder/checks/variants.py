"""Diagnosing by changed inputs: what the reference computes from inputs changed as a natural mistake changes
them (a square weight transposed, a bias left out, two arguments of one shape swapped). Named only when
exactly one change computes the learner's outputs on every failed case."""
from __future__ import annotations

import dataclasses
import itertools
import re

import torch

from autograder.checks.comparing import same_value, your_output
from autograder.checks.running import memo, parameter_names, reference_outcome, run_call, who


BIAS = re.compile(r"b(_\w+)?|bias(_\w+)?|\w*\.bias")
MOST_VARIANTS = 16


def variants(exercise, call, weights):
    """[(name, sentence, change)]: the reference's inputs changed as a natural mistake changes them, a square
    weight transposed, a bias left out, two arguments of one shape swapped; change(call, weights) returns
    the changed (call, weights). Sentences follow "Your output is"."""
    if exercise.kind not in ("function", "module"):
        return []
    names = parameter_names(exercise.reference, exercise.kind)
    given = [(names[i] if i < len(names) else f"argument {i + 1}", i, x) for i, x in enumerate(call.args)]
    given += [(k, k, x) for k, x in call.kwargs.items()]
    tensors = [(n, at, x) for n, at, x in given if type(x) is torch.Tensor and x.is_floating_point()]
    found = []
    for n, at, x in tensors:
        if x.ndim >= 2 and x.shape[-1] == x.shape[-2] > 1:
            found.append((f"{n} transposed", f"what the reference computes with {n} transposed: your code uses {n} "
                          f"the other way round ({n} where {n}.T belongs, or {n}.T where {n} does).",
                          _change_argument(at, lambda t: t.transpose(-1, -2))))
        if BIAS.fullmatch(n):
            found.append((f"without {n}", f"what the reference computes without {n}: a bias left out.",
                          _change_argument(at, torch.zeros_like)))
    for p, w in (weights or {}).items():
        if w.is_floating_point() and w.ndim == 2 and w.shape[0] == w.shape[1] > 1:
            layer = p.removesuffix(".weight")
            how = (f": nn.Linear keeps its weight as (out, in) and computes x @ weight.T, as self.{layer}(x) does"
                   if p.endswith(".weight") else "")
            found.append((f"{p} transposed", f"what the reference computes with the parameter {p} transposed{how}.",
                          _change_weight(p, lambda t: t.T.contiguous())))
        if p.endswith("bias"):
            found.append((f"without {p}", f"what the reference computes without the parameter {p}: a bias left out.",
                          _change_weight(p, torch.zeros_like)))
    for (a, at, x), (b, bt, y) in itertools.combinations(tensors, 2):
        if x.shape == y.shape and x.dtype == y.dtype:
            found.append((f"{a} and {b} swapped", f"what the reference computes with {a} and {b} swapped.", _swap_arguments(at, bt)))
    return found[:MOST_VARIANTS]


def _replaced(call, at, value):
    if isinstance(at, int):
        return dataclasses.replace(call, args=call.args[:at] + (value,) + call.args[at + 1:])
    return dataclasses.replace(call, kwargs={**call.kwargs, at: value})


def _argument(call, at):
    return call.args[at] if isinstance(at, int) else call.kwargs[at]


def _change_argument(at, f):
    return lambda call, weights: (_replaced(call, at, f(_argument(call, at)).detach().clone()), weights)


def _swap_arguments(at, bt):
    return lambda call, weights: (_replaced(_replaced(call, at, _argument(call, bt)), bt, _argument(call, at)), weights)


def _change_weight(p, f):
    return lambda call, weights: (call, {**weights, p: f(weights[p])})


def variant_outcomes(exercise, case):
    """{name: (sentence, the reference's forward-only outcome on `case` with that change)}, the changes that
    run; precomputed where the reference is not at hand (autograder.reference_data)."""
    if case.variant_outcomes is not None:
        return case.variant_outcomes
    if exercise.reference is None or case.raises is not None:
        return {}
    return memo(case, ("variants", who(exercise)), lambda: _variant_outcomes(exercise, case))


def _variant_outcomes(exercise, case):
    _, weights = reference_outcome(exercise, case)
    found = {}
    for name, says, change in variants(exercise, case.make(), weights):
        call, changed = change(case.make(), weights)
        outcome = run_call(exercise.kind, exercise.train_mode, exercise.reference, call, False, changed,
                                state_after=exercise.state_after)
        if outcome.error is None:
            found[name] = (says, outcome)
    return found


def by_variant(exercise, failed, wants):
    """The sentence of the one change of the reference's inputs that computes the learner's outputs on every
    failed case (and not the reference's), or ''."""
    if any(got.error is not None for _, got in failed) or len(wants) != len(failed) or None in wants:
        return ""
    held, differs, first = None, set(), None
    for (case, got), want in zip(failed, wants):
        found = variant_outcomes(exercise, case)
        first = first or found
        matching = {n for n, (_, out) in found.items() if same_value(got.outputs, out.outputs)}
        differs |= {n for n in matching if not same_value(found[n][1].outputs, want.outputs)}
        held = matching if held is None else held & matching
        if not held:
            return ""
    held &= differs
    if len(held) != 1:
        return ""  # two changes that compute the same thing: naming either could be wrong
    subject = your_output(exercise, 0, 1) if len(failed[0][1].outputs) == 1 else "Your outputs are"
    return f"{subject} {first[held.pop()][0]}"
