"""How a learner's wrong tensor relates to the reference's, for any exercise.

When no catalogued mistake reproduces a learner's output (autograder.core.diagnose), the check
still says, when it can, how that output is the reference's transformed: transposed, shifted or
reversed along an axis, scaled or offset by a constant, normalised along another axis, broadcast
over all pairs, or NaN in some rows; or that it is what the reference computes from changed inputs: a
square weight transposed, two arguments of one shape swapped, a bias left out (`variants`). A relation
is named only when it holds, within the check's tolerances, on every failed case, and no other one of
its kind does; a wrong name is worse than none. `raised_at` says where a learner's code raised.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import linecache
import math
import re
import sys
import sysconfig
from pathlib import Path

import torch

from autograder import core

ORDINALS = ["first", "second", "third", "fourth", "fifth"]
STEPS = {1: "one step", 2: "two steps"}
MAX_ENTRIES = 10**5  # larger outputs are not searched


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
        said = _by_variant(exercise, failed, wants)
        if said:
            return said
        pairs, index = _pairs(failed, wants)
        if not pairs:
            return ""
        names = axis_names(exercise, index, pairs[0][1].shape, impl)
        subject = _subject(exercise, index, len(failed[0][1].outputs))
        return (relate(pairs, names, subject) or _by_norm(exercise, failed, pairs, names, subject)
                or _by_sizes(exercise, failed, pairs, impl, subject))
    except Exception:  # a learner's odd output must never break the check
        return ""


def _pairs(failed, wants):
    """([(learner's, reference's) tensor], output index) for the first output that fails in the first failed case."""
    def lined_up(got, want):
        return want is not None and want.error is None and got.error is None and len(got.outputs) == len(want.outputs)

    if len(wants) != len(failed) or not all(lined_up(got, want) for (_, got), want in zip(failed, wants)):
        return [], None
    first_got, first_want = failed[0][1].outputs, wants[0].outputs
    index = next((i for i, (g, w) in enumerate(zip(first_got, first_want)) if core.compare_value("x", g, w)), None)
    if index is None:
        return [], None
    pairs = [(got.outputs[index], want.outputs[index]) for (_, got), want in zip(failed, wants)]
    if not all(_comparable(g, w) and core.compare_tensor("x", g, w) for g, w in pairs):
        return [], None
    return [(g.detach().cpu(), w.detach().cpu()) for g, w in pairs], index


def _comparable(got, want):
    return (type(got) is torch.Tensor and isinstance(want, torch.Tensor) and want.dtype != torch.bool
            and got.dtype == want.dtype and got.device == want.device and 0 < want.numel() <= MAX_ENTRIES
            and got.numel() <= MAX_ENTRIES * max(want.shape, default=1))


def _subject(exercise, index, n_outputs):
    if len(exercise.returns) == n_outputs:
        name = exercise.returns[index]
    else:
        name = "output" if n_outputs == 1 else f"returned value {index + 1}"
    return f"Your {name} {core._v('the ' + name, 'is')}"


# ---------------------------------------------------------------- axis names


def axis_names(exercise, index, shape, impl=None):
    """The names of the `index`-th output's axes, from the reference's docstring ("-> scores: (B, T)",
    "returns h_t: (B, d_h)"), or the learner's where there is no reference, or None when it does not
    say them plainly, or they do not fit `shape`."""
    reference = exercise.reference or impl
    if reference is None:
        return None
    own = (reference, vars(reference).get("forward")) if inspect.isclass(reference) else (reference,)
    doc = "\n".join(x.__doc__ or "" for x in own if x is not None)  # never a base class's
    said = re.findall(r"(?:->|\breturns?\b)(.*)", doc)  # the rest of the line: "-> scores: (B, T)"
    shapes = re.findall(r"\w: \(([^()]*)\)", said[-1]) if said else []
    if index >= len(shapes):
        return None
    names = [n.strip() for n in shapes[index].split(",")]
    if len(names) != len(shape) or not all(re.fullmatch(r"\w+( \w+)?", n) for n in names):
        return None
    sizes = {}
    if any(sizes.setdefault(n, size) != size or n.isdigit() and int(n) != size for n, size in zip(names, shape)):
        return None
    return names


def _axis(names, shape, a):
    return f"axis {a} ({names[a]}, size {shape[a]})" if names else f"axis {a} (size {shape[a]})"


def _fmt(x):
    return f"{x:.4g}"


# ---------------------------------------------------------------- closeness


def close(got, pred, dtype):
    """Whether `got` matches `pred` as the check would match it with the reference (NaN where `pred` is NaN)."""
    if got.shape != pred.shape:
        return False
    atol, rtol = core.TOLERANCES.get(dtype, (1e-5, 1e-4))
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
        here = "" if words in ("2", "1/2", "-1") else f" ({_fmt(value(shape))} in the first failing case)"
        return f"the reference's times {' or '.join(w for w, _ in held)}{here}."
    got, want = pairs[0]
    finite = got.isfinite() & want.isfinite()
    denominator = float((want[finite].double() ** 2).sum())
    if denominator == 0:
        return ""
    c = float((got[finite].double() * want[finite].double()).sum()) / denominator
    if abs(c) < 1e-3 or not _enough(pairs) or not _holds(pairs, lambda g, w: w * c):
        return ""
    return f"the reference's times a constant, {_fmt(c)}."


def _offset(pairs, names, shape):
    got, want = pairs[0]
    delta = (got.double() - want.double())[got.isfinite() & want.isfinite()]
    if delta.numel() and _enough(pairs) and _holds(pairs, lambda g, w: w + float(delta.mean())):
        return f"the reference's plus a constant, {_fmt(float(delta.mean()))}."
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
    weights = [case.weights if case.expected is not None else core.reference_outcome(exercise, case)[1] for case, _ in failed]
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
    docs = _doc_shapes(exercise.reference or impl)
    for (case, _), (got, want) in zip(failed, pairs):
        differ = [a for a in range(want.ndim) if got.ndim == want.ndim and got.shape[a] != want.shape[a]]
        if len(differ) != 1:
            return ""
        a, sizes = differ[0], {}
        call = case.make()
        names = core._parameter_names(exercise.reference or impl, exercise.kind)
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
    atol, rtol = core.TOLERANCES.get(x.dtype, (1e-5, 1e-4))
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


# ---------------------------------------------------------------- the reference on changed inputs

BIAS = re.compile(r"b(_\w+)?|bias(_\w+)?|\w*\.bias")
MOST_VARIANTS = 16


def variants(exercise, call, weights):
    """[(name, sentence, change)]: the reference's inputs changed as a natural mistake changes them, a square
    weight transposed, a bias left out, two arguments of one shape swapped; change(call, weights) returns
    the changed (call, weights). Sentences follow "Your output is"."""
    if exercise.kind not in ("function", "module"):
        return []
    names = core._parameter_names(exercise.reference, exercise.kind)
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
    _, weights = core.reference_outcome(exercise, case)
    found = {}
    for name, says, change in variants(exercise, case.make(), weights):
        call, changed = change(case.make(), weights)
        outcome = core.run_call(exercise.kind, exercise.train_mode, exercise.reference, call, False, changed,
                                state_after=exercise.state_after)
        if outcome.error is None:
            found[name] = (says, outcome)
    return found


def _by_variant(exercise, failed, wants):
    """The sentence of the one change of the reference's inputs that computes the learner's outputs on every
    failed case (and not the reference's), or ''."""
    if any(got.error is not None for _, got in failed) or len(wants) != len(failed) or None in wants:
        return ""
    held, differs, first = None, set(), None
    for (case, got), want in zip(failed, wants):
        found = variant_outcomes(exercise, case)
        first = first or found
        matching = {n for n, (_, out) in found.items() if core.same_value(got.outputs, out.outputs)}
        differs |= {n for n in matching if not core.same_value(found[n][1].outputs, want.outputs)}
        held = matching if held is None else held & matching
        if not held:
            return ""
    held &= differs
    if len(held) != 1:
        return ""  # two changes that compute the same thing: naming either could be wrong
    subject = _subject(exercise, 0, 1) if len(failed[0][1].outputs) == 1 else "Your outputs are"
    return f"{subject} {first[held.pop()][0]}"


# ---------------------------------------------------------------- where a learner's code raised

_LIBRARIES = tuple(str(Path(p).resolve()) for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                                    sysconfig.get_paths()["platlib"], Path(torch.__file__).parent,
                                                    Path(__file__).parent, Path(__file__).parent.parent / "course_lib"})
MOST_NAMES = 8


def raised_at(error, impl, seconds=5):
    """Lines saying where the learner's own code raised `error`: the line, and the shape of each tensor it
    names beside the shape the docstring gives it; () when the traceback does not reach the learner's code.
    Reading the names runs the learner's attribute lookups and layers again: `seconds` bounds it."""
    try:
        with core.time_limit(seconds):
            return _raised_at(error, impl)
    except Exception:  # an odd object of the learner's, a layer that loops: the check's own message stands
        return ()


def _raised_at(error, impl):
    mine = []  # the learner's frames, outermost first
    tb = getattr(error, "__traceback__", None)
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_LIBRARIES):
            mine.append((tb.tb_frame, linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_globals).strip()))
        tb = tb.tb_next
    if not mine or not mine[-1][1]:
        return ()
    frame, line = mine[-1]
    lines = [f"it raised at this line of your code{_in(frame)}:", f"  {line}"]
    for outer, called in reversed(mine[-3:-1]):
        if called:
            lines += [f"called from this line{_in(outer)}:", f"  {called}"]
    docs = _docstring_shapes(impl, frame)
    named = []
    for text, value in _named_values(line, frame):
        said = _describe_value(value)
        if said:
            expected = docs.get(text.removeprefix("self."))
            named.append(f"  {text}: {said}" + (f"; the docstring says {expected}" if expected else ""))
    if named:
        lines += ["where"] + named[:MOST_NAMES]
    lines += _axes_named(line, frame, docs)
    return tuple(lines)


def _axes_named(line, frame, docs):
    """ "dim=1 is axis h of self.keys[i]'s (B, h, T_cached, d_k)" for each constant dim on the line."""
    dims = sorted({int(d) for d in re.findall(r"\bdim=(-?\d+)", line)})
    shaped = [(text, value, docs.get(text.removeprefix("self."))) for text, value in _named_values(line, frame)]
    shaped = [(t, v, d) for t, v, d in shaped if d and type(v) is torch.Tensor and len(d.split(",")) == v.ndim]
    if not dims or not shaped:
        return []
    text, value, doc = shaped[0]
    axes = [a.strip() for a in doc.strip("()").split(",")]
    return [f"dim={d} is axis {axes[d]} of {text}'s {doc}" for d in dims if -len(axes) <= d < len(axes)]


def _in(frame):
    name = frame.f_code.co_name
    return "" if name.startswith("<") else f" in {name}"


def _named_values(line, frame):
    """[(text, value)] of the names, attributes and simple subscripts on `line` (H, self.W1, keys[i]) and of
    the modules it calls on them (self.W2(s)), in the order they appear, read from the frame without calling
    anything but attribute lookups and those modules."""
    try:
        tree = ast.parse(line.removesuffix(":") if line.endswith(":") else line)
    except SyntaxError:
        tree = ast.parse(" ".join(re.findall(r"[A-Za-z_][\w.]*", line)) or "0")
    found, seen = [], {"self"}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            continue
        text = ast.unparse(node)
        if text in seen:
            continue
        seen.add(text)
        try:
            value = _evaluate(node, frame)
        except core.CheckTimeout:  # raised_at's limit: reading the line stops there
            raise
        except Exception:  # a name the frame does not have, an index out of range, a call that fails
            continue
        found.append((node.col_offset, -len(text), text, value))
    return [(text, value) for *_, text, value in sorted(found, key=lambda f: f[:2])]


def _evaluate(node, frame):
    if isinstance(node, ast.Name):
        if node.id in frame.f_locals:
            return frame.f_locals[node.id]
        return frame.f_globals[node.id]
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            raise AttributeError(node.attr)
        return getattr(_evaluate(node.value, frame), node.attr)
    if isinstance(node, ast.Subscript):
        container = _evaluate(node.value, frame)
        index = node.slice.value if isinstance(node.slice, ast.Constant) else _evaluate(node.slice, frame)
        if isinstance(container, (list, tuple)) and type(index) is int:
            return container[index]
    if isinstance(node, ast.Call) and not node.keywords and isinstance(node.func, (ast.Name, ast.Attribute)):
        module = _evaluate(node.func, frame)  # a layer applied to tensors: self.W2(s)
        args = [_evaluate(a, frame) for a in node.args]
        if isinstance(module, torch.nn.Module) and args and all(type(a) is torch.Tensor for a in args):
            with torch.no_grad():
                return module(*args)
    raise ValueError("not read")


def _describe_value(x):
    if type(x) is torch.Tensor or isinstance(x, torch.nn.Parameter):
        text = f"{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}"
        if not x.is_floating_point() and 0 < x.numel():
            low, high = int(x.min()), int(x.max())
            text += f", values {low} to {high}" if low != high else f", every value {low}"
        return text
    if isinstance(x, torch.nn.Module):
        text = repr(x)
        return text if "\n" not in text and len(text) <= 100 else type(x).__name__
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return repr(x)
    return ""


def _docstring_shapes(impl, frame):
    """{name: "(B, T, d)"} from the docstrings of the learner's exercise and of the function that raised."""
    self = frame.f_locals.get("self")
    raised = getattr(type(self), frame.f_code.co_name, None) if self is not None else frame.f_globals.get(frame.f_code.co_name)
    return _doc_shapes(raised) | _doc_shapes(impl)


def _doc_shapes(obj):
    """{name: "(B, T, d)"} from the docstrings of a function, or of a class and its forward: "x: (B, T, d)"."""
    owners = [obj, getattr(obj, "forward", None)] if inspect.isclass(obj) else [obj]
    shapes = {}
    for owner in owners:
        doc = getattr(owner, "__doc__", None) if owner is not None else None
        for names, shape in re.findall(r"([\w\[\].]+(?:, [\w\[\].]+)*): (\([^()]*\))", doc if isinstance(doc, str) else ""):
            for name in names.split(", "):
                shapes.setdefault(name, shape)
    return shapes


# ---------------------------------------------------------------- right but on one kind of case


def only_on(results):
    """ "right on every case but those with a mask": a word of the public cases' labels ("mask", "float64",
    "T=1") that every failed case has and no passed case has, or ''."""
    public = [r for r in results if not r.case.hidden]
    failed = [r for r in public if not r.ok]
    passed = [r for r in public if r.ok]
    if not failed or not passed or len(failed) < len(results) - len(passed):  # a hidden case failed: say nothing of it
        return ""

    def words(label):
        return {w.strip() for w in re.split(r"[,:(]", label) if w.strip() and not re.fullmatch(r"\w+=\d*[2-9]\d*", w.strip())}

    common = set.intersection(*(words(r.case.label) for r in failed)) - set.union(*(words(r.case.label) for r in passed))
    if len(common) != 1:
        return ""
    return f"Your code is right on every case but those labelled with {common.pop()!r}."
