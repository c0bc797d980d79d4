"""Diagnosing by relation: how a learner's wrong tensor relates to the reference's, for any exercise.

When no catalogued mistake reproduces a learner's output (autograder.checks.catalogue), the check
still says, when it can, how that output is the reference's transformed: transposed, shifted or
reversed along an axis, scaled or offset by a constant, normalised along another axis, broadcast
over all pairs, or NaN in some rows; or that it is what the reference computes from changed inputs
(autograder.checks.variants), or with its own source edited: a number at a neighbouring argument or with its
operators grouped another way (.scalars), a residual or norm left out, two arguments of a call swapped (.structure),
a size read from another axis, a sum or softmax over another axis, an unsqueeze left out (.sizes). A relation is named only when it holds, within the check's tolerances,
on every failed case, and no other one of its kind does; a wrong name is worse than none.
"""
from __future__ import annotations

import itertools
import math
import re

import torch

from autograder.checks.comparing import TOLERANCES, compare_tensor, compare_value, fmt, your_output
from autograder.checks.docstrings import axis_names, doc_shapes
from autograder.checks.running import parameter_names, reference_outcome
from autograder.checks.scalars import by_scalar, neighbours, regroupings
from autograder.checks.sizes import by_dim, by_size, by_unsqueeze, other_dims, size_reads, unsqueezes
from autograder.checks.structure import by_structure, by_swap, rewirings, swapped_arguments
from autograder.checks.variants import by_variant

ORDINALS = ["first", "second", "third", "fourth", "fifth"]
STEPS = {1: "one step", 2: "two steps"}
MAX_ENTRIES = 10**5  # larger outputs are not searched
# the finders of edits of the reference's source (autograder.checks.edits), whose outcomes the student
# distribution stores for each public case (autograder.ship)
EDIT_FINDERS = (neighbours, regroupings, rewirings, size_reads, other_dims, swapped_arguments, unsqueezes)


def explain(exercise, failed, wants, impl=None):
    """One sentence relating the learner's first failing tensor output to the reference's on every
    failed case, or ''. `failed` is a list of (case, learner's outcome), as diagnose takes it, and
    `wants` the reference's outcome of each; `impl`, the learner's code, lends its docstring's axis
    names where the reference is not at hand (the student distribution: the stub keeps the docstring)."""
    if not failed or failed[0][0].hidden:  # the sentence gives the first failed case's sizes: never a hidden one's
        return ""
    if len(wants) == len(failed):  # the cases that raised get their own lines (raised_at); the others must all agree
        kept = [i for i, (_, got) in enumerate(failed) if got.error is None]
        if kept and kept[0] == 0:
            failed, wants = [failed[i] for i in kept], [wants[i] for i in kept]
    try:
        said = (by_variant(exercise, failed, wants) or by_scalar(exercise, failed) or by_structure(exercise, failed)
                or by_size(exercise, failed))
        if said:
            return said
        pairs, index = _pairs(failed, wants)
        if pairs:
            names = axis_names(exercise, index, pairs[0][1].shape, impl)
            subject = your_output(exercise, index, len(failed[0][1].outputs))
            said = (relate(pairs, names, subject) or _by_norm(exercise, failed, pairs, names, subject)
                    or _by_sizes(exercise, failed, pairs, impl, subject))
        return said or by_dim(exercise, failed) or by_swap(exercise, failed) or by_unsqueeze(exercise, failed)
    except Exception:  # a learner's odd output must never break the check
        return ""


def _pairs(failed, wants):
    """([(learner's, reference's) tensor], output index) for the first output that fails in the first failed case."""
    def lined_up(got, want):
        return want is not None and want.error is None and got.error is None and len(got.outputs) == len(want.outputs)

    if len(wants) != len(failed) or not all(lined_up(got, want) for (_, got), want in zip(failed, wants)):
        return [], None
    first_got, first_want = failed[0][1].outputs, wants[0].outputs
    index = next((i for i, (g, w) in enumerate(zip(first_got, first_want)) if compare_value("x", g, w)), None)
    if index is None:
        return [], None
    pairs = [(got.outputs[index], want.outputs[index]) for (_, got), want in zip(failed, wants)]
    if not all(_comparable(g, w) and compare_tensor("x", g, w) for g, w in pairs):
        return [], None
    return [(g.detach().cpu(), w.detach().cpu()) for g, w in pairs], index


def _comparable(got, want):
    return (type(got) is torch.Tensor and isinstance(want, torch.Tensor) and want.dtype != torch.bool
            and got.dtype == want.dtype and got.device == want.device and 0 < want.numel() <= MAX_ENTRIES
            and got.numel() <= MAX_ENTRIES * max(want.shape, default=1))


def _axis(names, shape, a):
    return f"axis {a} ({names[a]}, size {shape[a]})" if names else f"axis {a} (size {shape[a]})"


# ---------------------------------------------------------------- closeness


def close(got, pred, dtype):
    """Whether `got` matches `pred` as the check would match it with the reference (NaN where `pred` is NaN)."""
    if got.shape != pred.shape:
        return False
    atol, rtol = TOLERANCES.get(dtype, (1e-5, 1e-4))
    got, pred = got.double(), pred.double()
    same_bad = (got.isnan() & pred.isnan()) | (got.isinf() & (got == pred))
    ok = (got - pred).abs() <= atol + rtol * pred.abs()
    return bool((ok | same_bad).all())


def _holds(pairs, predict):
    """Whether got matches predict(got, want) in every pair (predict returns None when it cannot apply)."""
    for got, want in pairs:
        pred = predict(got, want)
        if pred is None or not close(got, pred, want.dtype):
            return False
    return True


# ---------------------------------------------------------------- the relations, simplest first


def relate(pairs, names=None, subject="Your output is"):
    """The sentence naming how every learner's tensor relates to its reference, or ''."""
    shape = pairs[0][1].shape
    same_shape = all(g.shape == w.shape for g, w in pairs)
    if not pairs[0][1].is_floating_point():
        finders = [_permuted, _flipped, _shifted] if same_shape else [_permuted]
    elif same_shape:
        finders = [_non_finite, _permuted, _flipped, _shifted, _scaled, _offset, _normalised]
    else:
        finders = [_permuted, _diagonal]
    for find in finders:
        said = find(pairs, names, shape)
        if said:
            return f"{subject} {said}"
    return ""


def _non_finite(pairs, names, shape):
    """NaN or inf at some indices of the first axis only, the reference's values everywhere else."""
    if not shape:
        return ""
    evidence = False
    for got, want in pairs:
        rows = (~got.isfinite() & want.isfinite()).reshape(len(got), -1).any(1)
        kept = ~rows
        if not rows.any() or not close(got[kept], want[kept], want.dtype):
            return ""
        evidence |= bool(kept.any())
    if not evidence:
        return ""
    got, want = pairs[0]
    rows = (~got.isfinite() & want.isfinite()).reshape(len(got), -1).any(1).nonzero().flatten().tolist()
    which = ", ".join(map(str, rows[:5])) + (", …" if len(rows) > 5 else "")
    kind = "NaN" if got.isnan().any() else "inf"
    first = "" if len(pairs) == 1 else " in the first failing case"
    said = f"{kind} at index {which} of {_axis(names, shape, 0)}{first}, and the reference's everywhere else"
    if all((w[~g.isfinite() & w.isfinite()] == 0).all() for g, w in pairs):
        said += (": there the reference's entries are 0, where yours divides 0 by 0, as a row with nothing in it does "
                 "(no counts, or every position masked): such a row needs a guard")
    return said + "."


def _permuted(pairs, names, shape):
    n = len(shape)
    if not 2 <= n <= 5:
        return ""
    perms = sorted((p for p in itertools.permutations(range(n)) if list(p) != list(range(n))),
                   key=lambda p: (sum(i != a for i, a in enumerate(p)), p != (*range(n - 2), n - 1, n - 2)))
    for p in perms:
        if _holds(pairs, lambda g, w: w.permute(p) if w.ndim == n else None):
            moved = [i for i in range(n) if p[i] != i]
            if moved == [n - 2, n - 1]:
                return "the reference's transposed (last two axes swapped)."
            if len(moved) == 2:
                return f"the reference's with {_axis(names, shape, moved[0])} and {_axis(names, shape, moved[1])} swapped."
            label = (lambda a: names[a]) if names else (lambda a: f"axis {a}")
            return (f"the reference's with its axes reordered: yours are ({', '.join(label(a) for a in p)}) "
                    f"where the reference's are ({', '.join(label(a) for a in range(n))}).")
    return ""


def _diagonal(pairs, names, shape):
    """An extra axis paired with axis a of the reference's, all pairs as broadcasting makes them:
    the learner's entries [i, i] along the two are the reference's."""
    n = len(shape)
    for a, extra in itertools.product(range(n), range(n + 1)):
        p, q = (extra, a + 1) if extra <= a else (a, extra)  # the extra axis and axis a, in the learner's

        def diagonal(g, w):
            if g.ndim != n + 1 or not g.shape[p] == g.shape[q] == w.shape[a]:
                return None
            return torch.diagonal(g, dim1=p, dim2=q).movedim(-1, a)

        if (all(diagonal(g, w) is not None and close(diagonal(g, w), w, w.dtype) for g, w in pairs)
                and any(w.shape[a] > 1 for _, w in pairs)):
            return (f"the reference's with an extra axis: every index of {_axis(names, shape, a)} is paired with "
                    f"every other, as broadcasting does, and your entries [i, i] along axes {p} and {q} are the reference's.")
    return ""


def _flipped(pairs, names, shape):
    for a in range(len(shape)):
        if shape[a] > 1 and _holds(pairs, lambda g, w: w.flip(a)):
            return f"the reference's reversed along {_axis(names, shape, a)}."
    return ""


def _shifted(pairs, names, shape):
    """got[t + k] == want[t] along one axis (k > 0: yours lags; k < 0: yours leads), the ends aside."""
    for a, k in itertools.product(range(len(shape)), (1, -1, 2, -2)):
        evidence = False
        for got, want in pairs:
            size = want.shape[a]
            if size <= abs(k):
                continue
            mine = got.narrow(a, max(k, 0), size - abs(k))
            theirs = want.narrow(a, max(-k, 0), size - abs(k))
            if not close(mine, theirs, want.dtype) or close(mine, want.narrow(a, max(k, 0), size - abs(k)), want.dtype):
                break
            evidence = True
        else:
            if evidence:
                yours, reference = (abs(k), 0) if k > 0 else (0, abs(k))
                return (f"the reference's shifted {STEPS[abs(k)]} along {_axis(names, shape, a)}: "
                        f"your {ORDINALS[yours]} entry there is the reference's {ORDINALS[reference]}.")
    return ""


def _enough(pairs):
    """Whether the cases hold enough entries to vouch for a constant fitted to them (one number fits any one entry)."""
    return sum(w.numel() for _, w in pairs) >= 3


def _scale_names(names, shape):
    """(words, value for a shape) of the constants a scale is named by, simplest first."""
    size = (lambda a: names[a]) if names else (lambda a: f"the size of axis {a}")
    rows = [("2", lambda s: 2.0), ("1/2", lambda s: 0.5), ("-1", lambda s: -1.0)]
    if shape:
        d = size(len(shape) - 1)
        rows += [(f"sqrt({d})", lambda s: math.sqrt(s[-1])), (f"1/sqrt({d})", lambda s: 1 / math.sqrt(s[-1])),
                 (d, lambda s: float(s[-1])), (f"1/{d}" if names else f"1/({d})", lambda s: 1 / s[-1])]
        rows += [(f"1/{size(a)}" if names else f"1/({size(a)})", lambda s, a=a: 1 / s[a]) for a in range(len(shape) - 1)]
    return rows


def _scaled(pairs, names, shape):
    held = [(words, value) for words, value in _scale_names(names, shape) if _holds(pairs, lambda g, w: w * value(w.shape))]
    if held:
        words, value = held[0]
        here = "" if words in ("2", "1/2", "-1") else f" ({fmt(value(shape))} in the first failing case)"
        return f"the reference's times {' or '.join(w for w, _ in held)}{here}."
    got, want = pairs[0]
    finite = got.isfinite() & want.isfinite()
    denominator = float((want[finite].double() ** 2).sum())
    if denominator == 0:
        return ""
    c = float((got[finite].double() * want[finite].double()).sum()) / denominator
    if abs(c) < 1e-3 or not _enough(pairs) or not _holds(pairs, lambda g, w: w * c):
        return ""
    return f"the reference's times a constant, {fmt(c)}."


def _offset(pairs, names, shape):
    got, want = pairs[0]
    delta = (got.double() - want.double())[got.isfinite() & want.isfinite()]
    if delta.numel() and _enough(pairs) and _holds(pairs, lambda g, w: w + float(delta.mean())):
        return f"the reference's plus a constant, {fmt(float(delta.mean()))}."
    for a in range(len(shape)):
        offsets = [(g.double() - w.double()).nan_to_num(0).mean([d for d in range(w.ndim) if d != a], keepdim=True)
                   for g, w in pairs]  # NaN nowhere: a NaN of the learner's never matches
        varies = any(w.numel() > w.shape[a] and not close(b, b.mean().expand_as(b), w.dtype) for b, (_, w) in zip(offsets, pairs))
        if varies and all(close(g, w + b, w.dtype) for b, (g, w) in zip(offsets, pairs)):
            return (f"the reference's plus a constant for each index of {_axis(names, shape, a)}, "
                    f"as a bias added or left out would make.")
    return ""


def _by_norm(exercise, failed, pairs, names, subject):
    """A module's output that one of its LayerNorms (parameters P.gamma, P.beta) has normalised: every
    position's (output - P.beta) / P.gamma has mean 0 and variance 1 along the last axis; the reference's not."""
    if exercise.kind != "module" or not pairs[0][1].is_floating_point():
        return ""
    weights = [case.weights if case.expected is not None else reference_outcome(exercise, case)[1] for case, _ in failed]
    norms = [p.removesuffix(".gamma") for p in weights[0] if p.endswith(".gamma") and p[:-6] + ".beta" in weights[0]]

    def standard(x, w, p):
        if w[p + ".gamma"].shape != x.shape[-1:] or x.shape[-1] < 4:
            return False
        z = (x.double() - w[p + ".beta"].double()) / w[p + ".gamma"].double()
        return bool((z.mean(-1).abs() < 1e-3).all() and ((z.var(-1, unbiased=False) - 1).abs() < 1e-2).all())

    for p in norms:
        if all(standard(g, w, p) and not standard(want, w, p) for (g, want), w in zip(pairs, weights)):
            shape = pairs[0][1].shape
            return (f"{subject} normalised by {p} along {_axis(names, shape, len(shape) - 1)}: at every position, "
                    f"(yours - {p}.beta) / {p}.gamma has mean 0 and variance 1, and the reference's does not. "
                    f"A norm applied after a branch is added normalises the residual stream itself.")
    return ""


def _by_sizes(exercise, failed, pairs, impl, subject):
    """An output with one axis of the wrong size, which is the size of another named axis of the inputs
    (x: (B, T, d) in the docstring): "runs along B (size 2) where the reference's runs along T (size 6)"."""
    said = None
    docs = doc_shapes(exercise.reference or impl)
    for (case, _), (got, want) in zip(failed, pairs):
        differ = [a for a in range(want.ndim) if got.ndim == want.ndim and got.shape[a] != want.shape[a]]
        if len(differ) != 1:
            return ""
        a, sizes = differ[0], {}
        call = case.make()
        names = parameter_names(exercise.reference or impl, exercise.kind)
        given = dict(zip(names, call.args)) | call.kwargs
        for arg, x in given.items():
            axes = [n.strip() for n in docs.get(arg, "").strip("()").split(",")]
            if type(x) is torch.Tensor and len(axes) == x.ndim and all(re.fullmatch(r"\w+", n) for n in axes):
                for n, size in zip(axes, x.shape):
                    sizes.setdefault(size, set()).add(n)
        mine, theirs = sizes.get(got.shape[a], set()), sizes.get(want.shape[a], set())
        if len(mine) != 1 or len(theirs) != 1 or mine == theirs:
            return ""
        this = (a, mine.pop(), got.shape[a], theirs.pop(), want.shape[a])
        if said is not None and said[:2] + said[3:4] != this[:2] + this[3:4]:
            return ""
        said = said or this
    a, mine, m, theirs, t = said
    noun = subject.removesuffix(" is").removesuffix(" are")
    return (f"{noun}'s axis {a} runs along {mine} (size {m}) where the reference's runs along {theirs} (size {t}): "
            f"a sum, a softmax or an index over the wrong axis would do that.")


def _sums_to_one(x, a):
    atol, rtol = TOLERANCES.get(x.dtype, (1e-5, 1e-4))
    s = x.double().sum(a)
    return bool(((s - 1).abs() <= atol * x.shape[a] + rtol).all())


def _normalised(pairs, names, shape):
    """The learner's sums to 1 along axis a, the reference's along another axis b."""
    for a, b in itertools.permutations(range(len(shape)), 2):
        if shape[a] < 2 or shape[b] < 2:
            continue
        if all((g >= 0).all() and ((g > 0) == (w > 0)).all() and _sums_to_one(g, a) and _sums_to_one(w, b)
               and not _sums_to_one(g, b) for g, w in pairs):
            return (f"normalised along {_axis(names, shape, a)}, where the reference's is normalised along "
                    f"{_axis(names, shape, b)}: each sums to 1 there.")
    return ""
