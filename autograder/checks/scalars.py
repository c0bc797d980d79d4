"""Diagnosing a function that returns one number (a learning rate, a length penalty): the reference's at a
neighbouring integer argument (step - 1: off by one), or the reference's formula with its operators grouped
another way ((5 + L) / 6 ** alpha for ((5 + L) / 6) ** alpha). Named only when exactly one of them computes the
learner's number on every failed case."""
from __future__ import annotations

import ast
import numbers

import torch

from autograder.checks.comparing import your_output
from autograder.checks.edits import edited, the_one
from autograder.checks.running import parameter_names, reference_outcome

OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


def by_scalar(exercise, failed):
    """The sentence naming how the learner's number relates to the reference's, or ''."""
    if exercise.kind != "function" or not all(_one_number(got) for _, got in failed):
        return ""
    said = the_one(exercise, failed, neighbours)
    if said:
        return said
    said = the_one(exercise, failed, regroupings)
    return f"{your_output(exercise, 0, 1)} {said}" if said else ""


def _gives_one_number(exercise, case):
    """Whether the reference is a function whose output on `case` is one number (where edits are tried)."""
    return (exercise.kind == "function" and exercise.reference is not None and case.raises is None
            and _one_number(reference_outcome(exercise, case)[0]))


def _one_number(outcome):
    out = outcome.outputs
    return out is not None and len(out) == 1 and (
        isinstance(out[0], numbers.Real) and not isinstance(out[0], bool) or type(out[0]) is torch.Tensor and out[0].ndim == 0)


# ---------------------------------------------------------------- an integer argument one off


def neighbours(exercise, case):
    """[(name, sentence, the reference called with one integer argument moved by -1 or +1)] (a finder:
    autograder.checks.edits)."""
    if not _gives_one_number(exercise, case):
        return []
    call = case.make()
    names = parameter_names(exercise.reference, exercise.kind)
    given = [(names[i], i) for i, x in enumerate(call.args) if i < len(names) and _integer(x)]
    given += [(k, k) for k, x in call.kwargs.items() if _integer(x)]
    f = exercise.name
    found = []
    for n, at in given:
        for d in (-1, 1):
            says = (f"Your {f}({n}) is the reference's {f}({n} {'+' if d > 0 else '-'} 1): off by one {n} "
                    f"(is the count 0-based or 1-based?).")
            found.append((says, says, _moved(exercise.reference, at, d)))
    return found


def _integer(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _moved(reference, at, d):
    """The reference, called with its argument `at` (a position or a name) moved by d."""
    def moved(*args, **kwargs):
        if isinstance(at, int):
            args = args[:at] + (args[at] + d,) + args[at + 1:]
        else:
            kwargs = {**kwargs, at: kwargs[at] + d}
        return reference(*args, **kwargs)
    return moved


# ---------------------------------------------------------------- operators grouped another way


def regroupings(exercise, case):
    """[(name, sentence, the reference with one expression grouped another way)] (a finder: autograder.checks.edits);
    the sentences follow "Your output is"."""
    return edited(exercise.reference, _regrouped) if _gives_one_number(exercise, case) else []


def _regrouped(node):
    """[(name, sentence, node regrouped)]: a op1 (b op2 c) as (a op1 b) op2 c, and (a op1 b) op2 c as a op1 (b op2 c)."""
    if not isinstance(node, ast.BinOp) or type(node.op) not in OPS:
        return []
    found = []
    if isinstance(node.right, ast.BinOp) and type(node.right.op) in OPS:
        found.append(ast.BinOp(ast.BinOp(node.left, node.op, node.right.left), node.right.op, node.right.right))
    if isinstance(node.left, ast.BinOp) and type(node.left.op) in OPS:
        found.append(ast.BinOp(node.left.left, node.left.op, ast.BinOp(node.left.right, node.op, node.right)))
    said = [(f"what the reference's {ast.unparse(node)} computes when grouped as {grouped(new)}, where the "
             f"reference's groups it as {grouped(node)}: ** binds tighter than * and /, and * and / go left to right, "
             f"so the parentheses decide.", new) for new in found]
    return [(says, says, new) for says, new in said]


def grouped(node):
    """An expression with every grouping of its top two operators in parentheses: ((5 + L) / 6) ** alpha."""
    def part(x):
        return f"({ast.unparse(x)})" if isinstance(x, ast.BinOp) else ast.unparse(x)

    if not isinstance(node, ast.BinOp):
        return ast.unparse(node)
    return f"{part(node.left)} {OPS[type(node.op)]} {part(node.right)}"
