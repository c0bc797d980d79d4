"""Diagnosing the reference's wiring: a module's forward with one residual connection, one sublayer or one
norm left out, or a norm moved onto the branch (x + norm(f(x)) for norm(x + f(x))), run with the same weights;
and, in any function or forward, two neighbouring arguments of one call swapped (zip(ids[1:], ids) for
zip(ids, ids[1:]), model.encode(src_mask, src)). Named only when exactly one such edit computes the learner's
outputs, or raises the learner's very error, on every failed case."""
from __future__ import annotations

import ast
import re

from autograder.checks.edits import edited, named_by

NORM = re.compile(r"(\w*norm\w*|ln\w*)", re.IGNORECASE)
SWAPPED = re.compile(r"with (.+?) as (.+): its arguments (.+) swapped\.", re.DOTALL)  # no expression holds " as "


def by_structure(exercise, failed):
    """The sentence naming the residual, sublayer or norm the learner's module lacks or moved, or ''."""
    return named_by(exercise, failed, rewirings, ("module",))


def rewirings(exercise, case):
    """[(name, sentence, the reference's module rewired)] (a finder: autograder.checks.edits); the sentences
    follow "what the reference computes"."""
    if exercise.kind != "module" or exercise.reference is None or case.raises is not None:
        return []
    return edited(exercise.reference, lambda node: [(says, says, new) for says, new in _rewired(node)])


def _rewired(node):
    """[(sentence, replacement)] for a node of a forward: x + branch, or self.norm(...)."""
    said = f"with {ast.unparse(node)} as"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        for x, branch in ((node.left, node.right), (node.right, node.left)):
            if isinstance(x, ast.Name) and isinstance(branch, ast.Call):
                return [(f"{said} {ast.unparse(branch)}: the residual connection (its input {x.id} added back) is left out.", branch),
                        (f"{said} {x.id}: the sublayer's branch {ast.unparse(branch)} is left out.", x)]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and NORM.fullmatch(node.func.attr)
            and len(node.args) == 1 and not node.keywords):
        norm, (inner,) = node.func.attr, node.args
        found = [(f"{said} {ast.unparse(inner)}: the norm {norm} is left out.", inner)]
        if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Add):
            moved = ast.BinOp(inner.left, ast.Add(), ast.Call(node.func, [inner.right], []))
            found.append((f"{said} {ast.unparse(moved)}: {norm} normalises the branch only, where the reference's "
                          f"normalises the sum.", moved))
        return found
    return []


def by_swap(exercise, failed):
    """The sentence naming the call whose two arguments the learner's code swapped, or ''."""
    return named_by(exercise, failed, swapped_arguments, ("function", "module"), _one_call)


def swapped_arguments(exercise, case):
    """[(name, sentence, the reference with two neighbouring arguments of one call swapped)] (a finder:
    autograder.checks.edits); the sentences follow "what the reference computes"."""
    if exercise.kind not in ("function", "module") or exercise.reference is None or case.raises is not None:
        return []

    def sites(node):
        if not isinstance(node, ast.Call):
            return []
        found = []
        for i in range(len(node.args) - 1):
            a, b = node.args[i], node.args[i + 1]
            if isinstance(a, ast.Starred) or isinstance(b, ast.Starred) or ast.unparse(a) == ast.unparse(b):
                continue
            new = ast.Call(node.func, node.args[:i] + [b, a] + node.args[i + 2:], node.keywords)
            says = f"with {ast.unparse(node)} as {ast.unparse(new)}: its arguments {ast.unparse(a)} and {ast.unparse(b)} swapped."
            found.append((says, says, new))
        return found

    return edited(exercise.reference, sites)


def _one_call(sentences):
    """Swaps of one call's arguments that compute the same here (merge_pair(pair, ids, new_id) and
    merge_pair(ids, new_id, pair)): which of them the learner made cannot be told, but that the call's
    arguments are in another order can; '' where they are swaps of different calls."""
    found = [SWAPPED.fullmatch(s) for s in sentences]
    if not all(found) or len({m[1] for m in found}) != 1:
        return ""
    return (f"with {found[0][1]} as {' or as '.join(m[2] for m in found)}, which compute the same here: "
            f"its arguments swapped, in an order the outputs do not tell.")
