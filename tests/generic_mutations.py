"""Generic mutations of every exercise's reference, and what its check says about each.

A catalogue names the mistakes someone thought of; these are the mistakes nobody listed, made the same
way for every exercise: a weight transposed, the output shifted along time, a softmax or sum over the
neighbouring axis, a bias dropped, the output scaled by sqrt(d), two arguments swapped, an unsqueeze
forgotten, a size read from the neighbouring axis or the axis before, torch.arange(s, s + T) as torch.arange(s, T), a
min(a, b) cap dropped; a function returning one number called one step on, or
with an expression grouped another way; a module with a residual connection left out. Each is an edit of the reference's own source (or, for the shift and the scale, of its output),
checked on the public cases as a learner's code is. The check's message is then

    named    a catalogued mistake (counted apart too), or a sentence of autograder.checks' diagnoses of the
             mutation's kind, or the line of the learner's code that raised, when it is the mutated line
    wrong    a sentence of another kind: worse than none
    silent   nothing beyond how the output differs

    python tests/generic_mutations.py [NOTEBOOK ...]    prints the table of docs/MEASURED-MISTAKES.md
"""
from __future__ import annotations

import ast
import copy
import functools
import inspect
import math
import sys
import textwrap
import warnings
from collections import Counter
from dataclasses import dataclass

import torch

from autograder import api, registry
from autograder.checks.driver import check_exercise
from autograder.checks.running import reference_module, run_call
from autograder.mutants import mutant, swap

KINDS = {  # the kind of a mutation: words a right sentence about it uses
    "transpose a weight": ("transposed", "the other way round", "swapped", "reordered"),
    "shift along time": ("shifted",),
    "neighbouring axis": ("normalised along", "dim=", "transposed", "reordered", "extra axis", "the wrong axis"),
    "drop a bias": ("without", "a bias", "plus a constant"),
    "scale by sqrt(d)": ("times",),
    # swapping the operands of a batched product pairs every batch index with every other: an extra axis
    "swap two arguments": ("swapped", "transposed", "reordered", "extra axis"),
    "forget an unsqueeze": ("extra axis", "broadcast"),
    "step ± 1 in a scalar function": ("off by one",),
    "regroup an expression": ("grouped as",),
    "remove a residual": ("residual",),
    "size from the neighbouring axis": ("where the text's",),
    # issue 59's three, named wrongly once (B for h where B = h, arguments swapped, B for V): now named right or not at all
    "size from the axis before": ("where the text's",),  # KVCache.length reading size(1), the heads, for size(2)
    "arange to its length": ("arange(start, T)", "positions", "arange("),  # torch.arange(s, s + T) as torch.arange(s, T)
    "a cap dropped": ("exceed", "cap", "min("),  # min(top_k, V) as top_k
}
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
REDUCTIONS = {"softmax", "log_softmax", "sum", "mean", "cumsum", "amax", "max", "argmax", "logsumexp", "norm"}
BIAS_NAMES = ("b", "bias")


@dataclass
class Mutation:
    kind: str
    where: str  # the mutated line, as unparsed, or "output"
    impl: object


# ---------------------------------------------------------------- edits of the source


def _is_bias(node):
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name in BIAS_NAMES or name.startswith("b_") or name.endswith("bias")


def _sites(tree):
    """[(kind, node, replacement maker)] in source order: each applicable edit of one node."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "T":
            found.append(("transpose a weight", node, lambda n: n.value))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and isinstance(node.right, (ast.Name, ast.Attribute)) \
                and not (isinstance(node.right, ast.Attribute) and node.right.attr == "T"):
            found.append(("transpose a weight", node, lambda n: ast.BinOp(n.left, n.op, ast.Attribute(n.right, "T", ast.Load()))))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            if _is_bias(node.right):
                found.append(("drop a bias", node, lambda n: n.left))
            elif _is_bias(node.left):
                found.append(("drop a bias", node, lambda n: n.right))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Call) \
                and ast.unparse(node.right.func) in ("math.sqrt", "torch.sqrt", "sqrt"):
            found.append(("scale by sqrt(d)", node, lambda n: n.left))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ARITHMETIC) and isinstance(node.left, ast.BinOp) \
                and isinstance(node.left.op, ARITHMETIC):  # (a op b) op c as a op (b op c)
            found.append(("regroup an expression", node, lambda n: ast.BinOp(n.left.left, n.left.op, ast.BinOp(n.left.right, n.op, n.right))))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for x, branch in ((node.left, node.right), (node.right, node.left)):
                if isinstance(x, ast.Name) and isinstance(branch, ast.Call):
                    found.append(("remove a residual", node, lambda n, b=branch is node.right: n.right if b else n.left))
        if _size_index(node) is not None:
            found.append(("size from the neighbouring axis", node, _neighbouring_size))
            if _size_index(node) not in (0, -1):
                found.append(("size from the axis before", node, _size_before))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.arange" and len(node.args) == 2 \
                and isinstance(node.args[1], ast.BinOp) and isinstance(node.args[1].op, ast.Add) \
                and ast.unparse(node.args[1].left) == ast.unparse(node.args[0]):
            found.append(("arange to its length", node, lambda n: ast.Call(n.func, [n.args[0], n.args[1].right], n.keywords)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "min" and len(node.args) == 2 \
                and not node.keywords:
            found.append(("a cap dropped", node, lambda n: n.args[0]))
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "unsqueeze":
                found.append(("forget an unsqueeze", node, lambda n: n.func.value))
            if name in REDUCTIONS:
                dim = _dim(node)
                if dim is not None:
                    found.append(("neighbouring axis", node, _other_dim))
            simple = [a for a in node.args if isinstance(a, (ast.Name, ast.Attribute, ast.Subscript))]
            if len(node.args) >= 2 and len(simple) == len(node.args) and ast.unparse(node.args[0]) != ast.unparse(node.args[1]):
                found.append(("swap two arguments", node, lambda n: ast.Call(n.func, [n.args[1], n.args[0], *n.args[2:]], n.keywords)))
    return sorted(found, key=lambda f: (f[1].lineno, f[1].col_offset))


def _dim(call):
    """The constant int dim of a reduction: dim=-1, or the first argument of x.sum(-1)."""
    for k in call.keywords:
        if k.arg == "dim":
            return _int(k.value)
    if isinstance(call.func, ast.Attribute) and call.args and not isinstance(call.func.value, ast.Name) or \
            isinstance(call.func, ast.Attribute) and call.args and call.func.value.id not in ("torch", "F"):
        return _int(call.args[0])
    return None


def _int(node):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


def _other_dim(call):
    d = _dim(call)
    new = ast.Constant(d - 1 if d < 0 else d + 1)
    call = copy.deepcopy(call)
    for k in call.keywords:
        if k.arg == "dim":
            k.value = new
            return call
    call.args[0] = new
    return call


def _size_index(node):
    """The constant index of x.size(i) or x.shape[i], else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" and len(node.args) == 1:
        return _int(node.args[0])
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        return _int(node.slice)
    return None


def _neighbouring_size(node):
    i = _size_index(node)
    node = copy.deepcopy(node)
    new = ast.Constant(i - 1 if i < 0 else i + 1)
    if isinstance(node, ast.Call):
        node.args[0] = new
    else:
        node.slice = new
    return node


def _size_before(node):
    """x.size(i) as x.size(i - 1), counting from the front (from the end: i + 1 is the axis before)."""
    i = _size_index(node)
    node = copy.deepcopy(node)
    new = ast.Constant(i + 1 if i < 0 else i - 1)
    if isinstance(node, ast.Call):
        node.args[0] = new
    else:
        node.slice = new
    return node


class _Replace(ast.NodeTransformer):
    def __init__(self, target, make):
        self.target, self.make = target, make

    def generic_visit(self, node):
        node = super().generic_visit(node)
        return self.make(node) if node is self.target else node


def _source_mutations(base):
    source = textwrap.dedent(inspect.getsource(base))
    tree = ast.parse(source)
    before = ast.unparse(tree).splitlines()
    done = set()
    for i, (kind, _, make) in enumerate(_sites(tree)):
        if kind in done:  # the first site of each kind: a learner's mistake is rarely in two places
            continue
        copied = ast.parse(source)
        target = _sites(copied)[i][1]
        new = ast.unparse(ast.fix_missing_locations(_Replace(target, make).visit(copied)))
        changed = [line.strip() for line in new.splitlines() if line not in before]
        try:
            impl = mutant(base, swap(source, new + "\n"), f"generic {kind}")
        except Exception:  # an edit that does not compile
            continue
        done.add(kind)
        yield Mutation(kind, changed[0] if changed else "", impl)


# ---------------------------------------------------------------- edits of the output


def _output_mutation(ex, base, kind, change):
    """The reference with `change` applied to its first floating output of two or more axes, or None."""
    first = ex.cases()[0]
    index = _first_tensor(run_call(ex.kind, ex.train_mode, base if ex.kind == "function" else ex.reference, first.make(),
                                   False, reference_module(ex, first) and reference_module(ex, first).state_dict()).outputs or ())
    if index is None:
        return None

    def changed(out):
        outs = list(out) if isinstance(out, tuple) else [out]
        outs[index] = change(outs[index])
        return tuple(outs) if isinstance(out, tuple) else outs[0]

    if ex.kind == "function":
        @functools.wraps(base)
        def impl(*args, **kwargs):
            return changed(base(*args, **kwargs))
    elif ex.kind == "module":
        impl = type(base.__name__, (base,), {"forward": functools.wraps(base.forward)(lambda self, *a, **k: changed(base.forward(self, *a, **k)))})
    else:
        return None
    return Mutation(kind, "output", impl)


def _first_tensor(outputs):
    return next((i for i, x in enumerate(outputs) if type(x) is torch.Tensor and x.is_floating_point() and x.ndim >= 2), None)


def _shifted(x):
    return torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)


def _scaled(x):
    return x * math.sqrt(x.shape[-1])


def _step_mutation(ex, base):
    """A function returning one number, called with its first integer argument one more, or None."""
    call = ex.cases()[0].make()
    at = next((i for i, x in enumerate(call.args) if type(x) is int), None)
    out = run_call(ex.kind, ex.train_mode, base, call, False).outputs or ()
    if ex.kind != "function" or at is None or len(out) != 1 or type(out[0]) not in (int, float):
        return None

    @functools.wraps(base)
    def impl(*args, **kwargs):
        return base(*args[:at], args[at] + 1, *args[at + 1:], **kwargs)
    return Mutation("step ± 1 in a scalar function", "output", impl)


def mutations(ex):
    base = getattr(ex.reference, "__wrapped__", ex.reference)
    scalar = _step_mutation(ex, base)
    found = [m for m in _source_mutations(base)
             if (m.kind != "regroup an expression" or scalar) and (m.kind != "remove a residual" or ex.kind == "module")]
    if ex.kind in ("function", "module"):
        found += [_output_mutation(ex, base, "shift along time", _shifted), _output_mutation(ex, base, "scale by sqrt(d)", _scaled), scalar]
    return [m for m in found if m is not None]


# ---------------------------------------------------------------- what the check says


def verdict(ex, m):
    """'named', 'wrong', 'silent', or None when the mutation changes nothing the public cases show."""
    api._passed.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = check_exercise(ex, m.impl)
    if report.fraction == 1.0 or report.not_implemented:
        return None, ""
    lines, reason = api.explain(report, {})
    first = report.failures()[0]
    said = " ".join(lines)
    if first.diagnosis:
        return "catalogued", said
    if first.relation and not first.relation.startswith("Your code is right on every case but"):  # that one names no cause
        return ("named" if any(w in first.relation for w in KINDS[m.kind]) else "wrong"), said
    shown = [d.split("  #")[0].strip() for i, d in enumerate(first.detail)
             if i > 0 and first.detail[i - 1].startswith(("it raised at", "called from"))]
    if m.where in shown or any(w in first.problem for w in KINDS[m.kind]):
        return "named", said  # the learner is shown the line they changed, or the problem says what it is
    return "silent", said


def table(notebooks):
    """{notebook: Counter(named=, wrong=, silent=)} and the [(exercise, kind, verdict, message)] behind it."""
    counts, rows = {}, []
    for nb in notebooks:
        counts[nb] = Counter()
        for ex in registry.for_notebook(nb):
            for m in mutations(ex):
                v, said = verdict(ex, m)
                if v is not None:
                    counts[nb][v] += 1
                    counts[nb]["named"] += v == "catalogued"
                    v = "named" if v == "catalogued" else v
                    counts[nb][f"{v} in the source"] += m.where != "output"
                    rows.append((ex.name, m.kind, v, said))
    return counts, rows


def markdown(counts):
    lines = ["| notebook | mutations | named | of them by the catalogue | named wrongly | silent | edits of the source: named |",
             "|---|---|---|---|---|---|---|"]
    total = Counter()
    for nb, c in list(counts.items()) + [("all", total)]:
        if nb != "all":
            total.update(c)
        n = c["named"] + c["wrong"] + c["silent"]
        source = c["named in the source"] + c["wrong in the source"] + c["silent in the source"]
        lines.append(f"| {nb} | {n} | {c['named']} ({100 * c['named'] / max(n, 1):.0f} %) | {c['catalogued']} | {c['wrong']} "
                     f"| {c['silent']} | {c['named in the source']} of {source} |")
    return "\n".join(lines)


if __name__ == "__main__":
    torch.set_num_threads(1)
    wanted = sys.argv[1:] or sorted({ex.notebook for ex in registry.all_exercises()})
    counts, rows = table(wanted)
    for name, kind, v, said in rows:
        if v != "named":
            print(f"{v:6} {name:28} {kind:20} {said[:300]}")
    print(markdown(counts))
