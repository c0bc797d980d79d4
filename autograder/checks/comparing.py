"""Comparing outcomes: the learner's outputs and gradients against the reference's, within a tolerance per
dtype; the sentence that says the first difference, the entries where it differs, and the case's inputs
as a learner reads them."""
from __future__ import annotations

import functools
import math

import torch

from autograder.checks.cases import StudentError


# Tolerances per dtype: (atol, rtol). A value passes when |a - b| <= atol + rtol * |b|.
TOLERANCES = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float32: (1e-5, 1e-4),
    torch.float64: (1e-10, 1e-8),
}


def fmt(x):
    return f"{x:.4g}"


_PLURAL = {"is": "are", "has": "have", "differs": "differ", "contains": "contain", "lacks": "lack"}


def agree(what, verb):
    """`verb` agreeing with the thing `what` names: "the output is", "the weights are"."""
    head = what.split(" of ")[0].split(" for ")[0].split("[")[0].split()[-1]
    return _PLURAL[verb] if head.endswith("s") and not head.endswith("ss") else verb


def your_output(exercise, index, n_outputs):
    if len(exercise.returns) == n_outputs:
        name = exercise.returns[index]
    else:
        name = "output" if n_outputs == 1 else f"returned value {index + 1}"
    return f"Your {name} {agree('the ' + name, 'is')}"


def compare_tensor(what, got, want):
    """Return '' when `got` matches `want`, else one sentence saying how it differs."""
    if not isinstance(got, torch.Tensor):
        kind = type(got).__module__ + "." + type(got).__name__ if type(got).__module__ != "builtins" else type(got).__name__
        return f"{what} {agree(what, 'is')} a {kind}, expected a torch.Tensor"
    if got.shape != want.shape:
        return f"{what} {agree(what, 'has')} shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"{what} {agree(what, 'has')} dtype {got.dtype}, expected {want.dtype}"
    if got.device != want.device:
        told = (": a tensor made without device= lands on the CPU, not on the device the call asks for or its inputs are on"
                if want.device.type == "meta" and got.device.type == "cpu" else "")
        return f"{what} {agree(what, 'is')} on {got.device}, expected {want.device}{told}"
    if want.device.type == "meta":  # the device cases' tensors: a shape, a dtype and a device, no values
        return ""
    if want.dtype == torch.bool or not want.is_floating_point():
        wrong = (got != want).sum().item()
        return f"{what} {agree(what, 'differs')} in {wrong} of {want.numel()} entries" if wrong else ""
    got, want = got.detach(), want.detach()
    bad_got = ~torch.isfinite(got)
    bad_want = ~torch.isfinite(want)
    if bool((bad_got & ~bad_want).any()):
        n = int((bad_got & ~bad_want).sum())
        kind = "NaN" if bool(torch.isnan(got).any()) else "inf"
        return f"{what} {agree(what, 'contains')} {kind} in {n} entries where the reference is finite"
    atol, rtol = TOLERANCES.get(want.dtype, (1e-5, 1e-4))
    diff = (got - want).abs().nan_to_num(0.0)
    limit = atol + rtol * want.abs().nan_to_num(0.0)
    if bool((diff > limit).any()):
        return f"{what} {agree(what, 'is')} off by up to {fmt(diff.max().item())} (tolerance {fmt(atol)} + {fmt(rtol)}·|expected|)"
    return ""


def _type_name(x):
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _short(x):
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _entry_name(what, key):
    """How to call entry `key` of the dict `what`: "the parameter W.weight after the step" for the
    state a training step leaves (autograder.state_of), else what[key]."""
    if what.startswith("the state after") and isinstance(key, str):
        return ("" if key.startswith("the ") else "the ") + key + what.removeprefix("the state")
    return f"{what}[{key!r}]"


def compare_value(what, got, want):
    """Like compare_tensor, for any value: tensors, numbers, strings, lists, tuples, dicts."""
    if isinstance(want, torch.Tensor):
        return compare_tensor(what, got, want)
    if isinstance(want, bool) or want is None or isinstance(want, str):
        if type(got) is not type(want):
            return f"{what} {agree(what, 'is')} a {_type_name(got)}, expected a {_type_name(want)}"
        return "" if got == want else f"{what} {agree(what, 'is')} {_short(got)}, expected {_short(want)}"
    if isinstance(want, (int, float)):
        if isinstance(want, float) and isinstance(got, torch.Tensor):  # the docstring asks for a float: a tensor is not one
            return (f"{what} {agree(what, 'is')} a {'0-d ' if got.ndim == 0 else ''}torch.Tensor, expected a Python float "
                    f"(the docstring asks for a float: .item() gives one)")
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"{what} {agree(what, 'is')} a {_type_name(got)}, expected a number"
        if isinstance(want, int) and not isinstance(got, int):
            return f"{what} {agree(what, 'is')} {got!r}, expected the integer {want}"
        if math.isnan(want) and math.isnan(got) or got == want:
            return ""
        if abs(got - want) <= 1e-6 + 1e-6 * abs(want):
            return ""
        return f"{what} {agree(what, 'is')} {got:.6g}, expected {want:.6g}"
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            return f"{what} {agree(what, 'is')} a {_type_name(got)}, expected a {_type_name(want)}"
        if len(got) != len(want):
            return f"{what} {agree(what, 'has')} {len(got)} items, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            problem = compare_value(f"item {i} of {what}", g, w)
            if problem:
                return problem
        return ""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{what} {agree(what, 'is')} a {_type_name(got)}, expected a dict"
        missing, extra = [k for k in want if k not in got], [k for k in got if k not in want]
        if missing:
            return f"{what} {agree(what, 'lacks')} the key(s) {', '.join(map(_short, missing[:3]))}"
        if extra:
            return f"{what} {agree(what, 'has')} unexpected key(s) {', '.join(map(_short, extra[:3]))}"
        for k, w in want.items():
            problem = compare_value(_entry_name(what, k), got[k], w)
            if problem:
                return problem
        return ""
    return "" if got == want else f"{what} {agree(what, 'is')} {_short(got)}, expected {_short(want)}"


def _compared(got, want, returns=()):
    """(name, learner's value, reference's value) for each output, then each gradient;
    or a string when the two cannot be lined up."""
    if len(want.outputs) > 1 and len(got.outputs) != len(want.outputs):
        return f"returned {len(got.outputs)} value(s), expected a tuple of {len(want.outputs)}"
    if len(want.outputs) == 1 and len(got.outputs) != 1:
        return f"returned a tuple of {len(got.outputs)}, expected a single {_type_name(want.outputs[0])}"
    if len(returns) == len(want.outputs):
        names = [f"the {r}" for r in returns]
    else:
        names = ["the output"] if len(want.outputs) == 1 else [f"returned value {i + 1}" for i in range(len(want.outputs))]
    pairs = list(zip(names, got.outputs, want.outputs))
    if want.grads is None or want.grads == "missing":
        return pairs
    if got.grads is None or got.grads == "missing":
        return pairs + ["the output carries no gradient (was it detached, or computed outside torch?)"]
    if isinstance(got.grads, StudentError):
        return pairs + [f"backpropagating through it raised {got.grads}"]
    for name, w in want.grads.items():
        if w is not None:
            pairs.append((f"the gradient for {name}", got.grads.get(name), w))
    return pairs


def compare_outcomes(got, want, returns=()):
    """'' when the learner's outputs and gradients match the reference's."""
    pairs = _compared(got, want, returns)
    if isinstance(pairs, str):
        return pairs
    for pair in pairs:
        if isinstance(pair, str):
            return pair
        name, g, w = pair
        if g is None and name.startswith("the gradient for "):
            return f"no gradient reaches {name.removeprefix('the gradient for ')}"
        problem = compare_value(name, g, w)
        if problem:
            return problem
    return ""


def first_differences(got, want, returns=(), most=3):
    """Lines showing where the first differing tensor of two outcomes differs, side by side."""
    pairs = _compared(got, want, returns)
    for pair in [] if isinstance(pairs, str) else pairs:
        if isinstance(pair, str) or pair[1] is None or not compare_value(pair[0], pair[1], pair[2]):
            continue
        name, g, w = pair
        same_kind = isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor) and type(g) is torch.Tensor
        if not (same_kind and g.shape == w.shape and g.dtype == w.dtype and g.device == w.device):
            return []  # the reason already says how they differ; entries side by side would not help
        try:
            g, w = g.detach().cpu(), w.detach().cpu()
            if w.is_floating_point():
                atol, rtol = TOLERANCES.get(w.dtype, (1e-5, 1e-4))
                wrong = ~((g - w).abs() <= atol + rtol * w.abs()) & ~(g.isnan() & w.isnan())
            else:
                wrong = g != w
            where = wrong.nonzero()[:most].tolist()
            entries = [f"  [{', '.join(map(str, i))}]  {_entry(w[tuple(i)])} → {_entry(g[tuple(i)])}" for i in where]
        except Exception:  # a learner's odd tensor must never break the check
            return []
        return [f"{name}, where it differs (expected → yours):"] + entries
    return []


def _entry(x):
    x = x.item()
    return f"{x:.4g}" if isinstance(x, float) else repr(x)


def describe_inputs(call, names=()):
    """Lines describing a case's inputs: shapes and dtypes, and the values of small tensors."""
    def one(name, x):
        if isinstance(x, torch.Tensor):
            text = f"{name}: {tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}" + (f" on {x.device}" if x.device.type != "cpu" else "")
            if x.numel() <= 12 and x.device.type != "meta":  # a meta tensor has no values
                text += f" = {_values(x.detach().cpu().tolist())}"
            return text
        if isinstance(x, torch.nn.Module):  # its repr runs over many lines
            params = list(x.parameters())
            dtype = f" {str(params[0].dtype).removeprefix('torch.')}" if params else ""
            return f"{name}: a {type(x).__name__} with {sum(p.numel() for p in params):,}{dtype} parameters, in {'training' if x.training else 'eval'} mode"
        if isinstance(x, torch.optim.Optimizer):  # its repr too
            return f"{name}: {type(x).__name__}, learning rate {x.param_groups[0]['lr']:.4g}"
        if isinstance(x, torch.optim.lr_scheduler.LRScheduler):
            return f"{name}: a {type(x).__name__} after {x.last_epoch} steps"
        if isinstance(x, torch.amp.GradScaler):
            return f"{name}: a GradScaler, scale {x.get_scale():g}" if x.is_enabled() else f"{name}: a GradScaler that scales nothing"
        if isinstance(x, torch.Generator):  # its repr is an address
            return f"{name}: a torch.Generator seeded {x.initial_seed()}" + (f" on {x.device}" if x.device.type != "cpu" else "")
        if isinstance(x, functools.partial) and x.func is torch.autocast:
            return f"{name}: torch.autocast({', '.join(map(repr, x.args))}, dtype={x.keywords.get('dtype')}) (a context manager)"
        return f"{name}: {_short(x)}"

    lines = [one(names[i] if i < len(names) else f"argument {i + 1}", x) for i, x in enumerate(call.args)]
    lines += [one(k, v) for k, v in call.kwargs.items()]
    if call.init is not None:
        lines.insert(0, "built as (" + ", ".join([_short(a) for a in call.init] + [f"{k}={_short(v)}" for k, v in call.init_kwargs.items()]) + ")")
    return lines


def _values(x):
    """Nested lists of numbers as Python writes them, floats with 4 significant digits: [[-1.391, 0.2034]]."""
    if isinstance(x, list):
        return "[" + ", ".join(_values(v) for v in x) + "]"
    return f"{x:.4g}" if isinstance(x, float) else repr(x)


def same_outputs(a, b):
    """Whether two outcomes computed the same thing (NaN equals NaN), for naming mistakes."""
    if a.error is not None or b.error is not None:
        return (
            a.error is not None
            and b.error is not None
            and type(a.error).__name__ == type(b.error).__name__  # one of them may have come out of the sandbox
            and str(a.error) == str(b.error)
        )
    return same_value(a.outputs, b.outputs)


def same_value(x, y):
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            return False
        if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
            return False
        x, y = x.detach(), y.detach()
        if x.device.type == "meta":
            return True  # no values to compare
        if x.is_floating_point():
            atol, rtol = TOLERANCES.get(x.dtype, (1e-5, 1e-4))
            return torch.allclose(x, y, atol=atol, rtol=rtol, equal_nan=True)
        return torch.equal(x, y)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(same_value(a, b) for a, b in zip(x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same_value(x[k], y[k]) for k in x)
    if isinstance(x, float) and isinstance(y, float):
        return (math.isnan(x) and math.isnan(y)) or x == y or abs(x - y) <= 1e-6 + 1e-6 * abs(y)
    return type(x) is type(y) and x == y


def describe_error(e):
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    if len(first) > 200:
        first = first[:200] + "…"
    return f"{type(e).__name__}: {first}" if first else type(e).__name__
