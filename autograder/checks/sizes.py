"""Diagnosing a size read from the wrong axis: the reference with one size it reads (q.size(-1), the text's
d_k) read from another axis of an input whose docstring names its axes (k: (B, T_k, d_k)); and a sum, a mean
or a softmax taken over another axis (dim=-2 where dim=-1 belongs). Named only when the sizes of exactly one
named axis, or exactly one other dim, compute the learner's outputs on every failed case; and an unsqueeze
left out (x where x.unsqueeze(1) belongs), which broadcasting lines up against other axes."""
from __future__ import annotations

import ast
import copy
import re

import torch

from autograder.checks.docstrings import doc_shapes
from autograder.checks.edits import edited, named_by
from autograder.checks.running import parameter_names


def by_size(exercise, failed):
    """ "what the reference computes with T_k (size 6) where the text's d_k (size 8) belongs", or ''."""
    return named_by(exercise, failed, size_reads, ("function", "module", "class"))


def size_reads(exercise, case):
    """[(name, sentence, the reference with one size it reads read from another named axis)] (a finder:
    autograder.checks.edits); the sentences, with the case's sizes, follow "what the reference computes"; an
    edit reading an axis the docstring does not name here (...) has none: another case may name it. A size
    read from a tensor the docstring names that is no input (keys[i]: (B, h, T_cached, d_k), as self.keys[0])
    is tried against that tensor's other named axes, without sizes: they are not known ahead."""
    if exercise.kind not in ("function", "module", "class") or exercise.reference is None or case.raises is not None:
        return []
    docs = doc_shapes(getattr(exercise.reference, "__wrapped__", exercise.reference))
    given, axes = {}, {}
    if exercise.kind != "class":
        call = case.make()
        given = dict(zip(parameter_names(exercise.reference, exercise.kind), call.args)) | call.kwargs
        axes = {n: _axis_names(docs.get(n, ""), x.ndim) for n, x in given.items() if type(x) is torch.Tensor}
        axes = {n: a for n, a in axes.items() if a is not None}
    held = {_held_key(k): [n.strip() for n in v.strip("()").split(",")] for k, v in docs.items() if k not in given}
    if not axes and not held:
        return []

    def sites(node):
        read = _size_read(node, axes)
        if read is None:
            return _held_sites(node, held)
        x, i = read
        old = axes[x][i]
        if old is None:
            return []
        found = []
        for y, named in axes.items():
            n = given[y].ndim
            for j in range(-n, n):
                if (y, j % n) == (x, i % given[x].ndim):
                    continue
                new = named[j]
                # named by the read it makes, the same in every case; said only where its axis is named here
                says = None if new is None or new == old else (
                    f"with {new} (size {given[y].shape[j]}) where the text's {old} (size {given[x].shape[i]}) "
                    f"belongs: a size read from the wrong axis.")
                found.append((f"{ast.unparse(node)} as {y}.size({j})", says,
                              ast.Call(ast.Attribute(ast.Name(y, ast.Load()), "size", ast.Load()), [ast.Constant(j)], [])))
        return found

    return edited(exercise.reference, sites)


def _held_key(text):
    """A tensor's name as a docstring and code both write it: keys[i] and self.keys[0] as keys[]."""
    return re.sub(r"\[[^\]]*\]", "[]", text.removeprefix("self."))


def _held_sites(node, held):
    """[(name, sentence, replacement)] for x.size(i) or x.shape[i] with x a tensor the docstring names that is
    no input (self.keys[0] for keys[i]: (B, h, T_cached, d_k)): the size of each other named axis of x."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" \
            and len(node.args) == 1 and not node.keywords:
        x, i = node.func.value, node.args[0]
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        x, i = node.value.value, node.slice
    else:
        return []
    names = held.get(_held_key(ast.unparse(x)))
    try:
        i = ast.literal_eval(i)
    except ValueError:
        return []
    if names is None or "..." in names or type(i) is not int or not -len(names) <= i < len(names):
        return []
    n, old = len(names), names[i]
    found = []
    for j, new in enumerate(names):
        if j != i % n and new != old:
            says = (f"with {new} where the text's {old} belongs ({ast.unparse(x)}: ({', '.join(names)})): "
                    f"a size read from the wrong axis.")
            at = j if i >= 0 else j - n
            found.append((f"{ast.unparse(x)}.size({at})", says,
                          ast.Call(ast.Attribute(copy.deepcopy(x), "size", ast.Load()), [ast.Constant(at)], [])))
    return found


def _axis_names(shape, ndim):
    """The docstring's names of a tensor's axes, None for an axis it does not name ("..."), or None."""
    names = [n.strip() for n in shape.strip("()").split(",")] if shape else []
    if names[:1] == ["..."] and len(names) - 1 <= ndim:
        return [None] * (ndim - len(names) + 1) + names[1:]
    return names if len(names) == ndim else None


def _size_read(node, axes):
    """(tensor name, axis) of x.size(i) or x.shape[i] with x an input of named axes, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" \
            and isinstance(node.func.value, ast.Name) and len(node.args) == 1 and not node.keywords:
        x, i = node.func.value.id, node.args[0]
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
            and isinstance(node.value.value, ast.Name):
        x, i = node.value.value.id, node.slice
    else:
        return None
    try:
        i = ast.literal_eval(i)
    except ValueError:  # not a constant
        return None
    if x not in axes or type(i) is not int or not -len(axes[x]) <= i < len(axes[x]):
        return None
    return x, i


REDUCTIONS = {"softmax", "log_softmax", "sum", "mean", "cumsum", "amax", "amin", "max", "min", "argmax", "logsumexp",
              "norm", "var", "std", "prod"}


def by_dim(exercise, failed):
    """ "what the reference computes with its softmax over dim -2 instead of dim -1", or ''."""
    return named_by(exercise, failed, other_dims, ("function", "module"))


def other_dims(exercise, case):
    """[(name, sentence, the reference with one reduction over another dim)] (a finder: autograder.checks.edits).
    A dim counted from the end is tried against the others counted from the end, one from the front likewise;
    the sentences follow "what the reference computes"."""
    if exercise.kind not in ("function", "module") or exercise.reference is None or case.raises is not None:
        return []

    def sites(node):
        read = _dim_of(node)
        if read is None:
            return []
        name, dim, put = read
        others = [d for d in (range(-4, 0) if dim < 0 else range(4)) if d != dim]
        return [(says, says, put(d)) for d in others
                for says in [f"with its {name} over dim {d} instead of dim {dim}: a {name} over the wrong axis."]]

    return edited(exercise.reference, sites)


def _dim_of(node):
    """(the reduction's name, its constant dim, a function making the call with another dim) of x.sum(-1),
    F.softmax(x, dim=-1) and the like, else None."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Attribute, ast.Name)):
        return None
    name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    if name not in REDUCTIONS:
        return None
    keyword = next((k for k in node.keywords if k.arg == "dim"), None)
    method = isinstance(node.func, ast.Attribute) and not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("torch", "F"))
    at = keyword.value if keyword is not None else node.args[0] if method and node.args else None
    try:
        dim = ast.literal_eval(at) if at is not None else None
    except ValueError:
        return None
    if type(dim) is not int:
        return None

    def put(d):
        new = copy.deepcopy(node)
        if keyword is not None:
            next(k for k in new.keywords if k.arg == "dim").value = ast.Constant(d)
        else:
            new.args[0] = ast.Constant(d)
        return new
    return name, dim, put


def by_unsqueeze(exercise, failed):
    """ "what the reference computes with x.unsqueeze(1) as x: the unsqueeze left out ...", or ''."""
    return named_by(exercise, failed, unsqueezes, ("function", "module"))


def unsqueezes(exercise, case):
    """[(name, sentence, the reference with one unsqueeze left out)] (a finder: autograder.checks.edits); the
    sentences follow "what the reference computes"."""
    if exercise.kind not in ("function", "module") or exercise.reference is None or case.raises is not None:
        return []

    def sites(node):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "unsqueeze"):
            return []
        if isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":  # torch.unsqueeze(x, d)
            if not node.args:
                return []
            x = node.args[0]
        else:
            x = node.func.value
        says = (f"with {ast.unparse(node)} as {ast.unparse(x)}: the unsqueeze left out, so broadcasting lines "
                f"{ast.unparse(x)}'s axes up against others than the reference's.")
        return [(says, says, x)]

    return edited(exercise.reference, sites)
