"""The check machinery: run a learner's function and the reference on the same
fresh inputs, compare outputs and gradients, and explain the first difference.

Nothing here knows about notebooks or nbgrader. autograder.checking puts it together with
autograder.relations into the check of an exercise, which `autograder.api` wraps for the
test cells and the command line.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import math
import numbers
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

# Tolerances per dtype: (atol, rtol). A value passes when |a - b| <= atol + rtol * |b|.
TOLERANCES = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float32: (1e-5, 1e-4),
    torch.float64: (1e-10, 1e-8),
}
DEFAULT_TIMEOUT_S = float(os.environ.get("AUTOGRADER_CHECK_TIMEOUT", "60"))


@dataclass
class Call:
    """The inputs of one case. For a module, `init` and `init_kwargs` are the constructor's arguments."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    init: tuple | None = None
    init_kwargs: dict = field(default_factory=dict)


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
    variant_outcomes: dict | None = None  # {name: (sentence, outcome)}: autograder.relations.variant_outcomes
    # A requirement of the exercise's text: on these inputs the code must raise this exception (its class name).
    raises: str | None = None


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


@dataclass
class Outcome:
    outputs: tuple | None = None
    grads: dict | None = None
    error: BaseException | None = None


@dataclass
class CaseResult:
    case: Case
    ok: bool
    problem: str = ""
    diagnosis: str = ""
    relation: str = ""  # with no diagnosis: how the learner's output relates to the reference's (autograder.relations)
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
        at the first stub or timeout, and the cases it never reached cannot vouch for the part."""
        rs = [r for r in self.results if r.case.part == part]
        planned = len(rs) if self.planned is None else sum(c.part == part for c in self.planned)
        return bool(rs) and len(rs) == planned and all(r.ok for r in rs)

    @property
    def not_implemented(self):
        return any(r.not_implemented for r in self.results)

    def failures(self):
        return [r for r in self.results if not r.ok]


# ---------------------------------------------------------------- running code


@contextlib.contextmanager
def time_limit(seconds, error=None):
    """Stop the code inside after `seconds` (main thread on Unix only), raising `error` (by default a
    CheckTimeout). A limit inside another keeps the other: it never extends it, and the outer one still
    fires on time."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or seconds is None:
        yield
        return
    outer_left = signal.getitimer(signal.ITIMER_REAL)[0]
    if outer_left and outer_left <= seconds:  # the enclosing limit comes first: it alone stands
        yield
        return

    def on_alarm(signum, frame):
        raise error if error is not None else CheckTimeout(f"did not finish within {seconds:g} s (an endless loop?)")

    start = time.monotonic()
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - start), 1e-3))


def _tensors_in(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors_in(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors_in(o)]
    return []


def gradients_in(call):
    """[(tensor, its .grad)] for the tensors and parameters of a call's arguments."""
    tensors = _tensors_in((call.args, call.kwargs))
    for arg in list(call.args) + list(call.kwargs.values()):
        if isinstance(arg, torch.nn.Module):
            tensors += list(arg.parameters())
        elif isinstance(arg, torch.optim.Optimizer):
            tensors += [p for group in arg.param_groups for p in group["params"]]
    return [(t, t.grad) for t in tensors if t.grad is not None]


def portable_call(call):
    """A call ready for torch.save, which drops every .grad (a training step's case may
    start with stale gradients); `restored_call` puts them back."""
    return {"call": call, "grads": gradients_in(call)}


def restored_call(stored):
    for tensor, grad in stored["grads"]:
        tensor.grad = grad
    return stored["call"]


def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def run(exercise, impl, case, reference_module=None, timeout=DEFAULT_TIMEOUT_S):
    """Call `impl` on fresh inputs of `case`; return its outputs and gradients.

    For a module exercise, `impl` is the class; the reference module's weights
    are copied into the learner's module so both compute the same function.
    """
    weights = reference_module.state_dict() if reference_module is not None else None
    return run_call(exercise.kind, exercise.train_mode, impl, case.make(), case.grad, weights, timeout, exercise.state_after)


def run_call(kind, train_mode, impl, call, grad, weights=None, timeout=DEFAULT_TIMEOUT_S, state_after=False):
    """`run` without the Exercise: what the grading sandbox needs (autograder.record)."""
    inputs = {}
    if grad:
        for i, t in enumerate(_tensors_in((call.args, call.kwargs))):
            if t.is_floating_point():
                t.requires_grad_(True)
                inputs[f"input {i}"] = t
    try:
        with time_limit(timeout):
            if kind == "module":
                fn = impl(*call.init, **call.init_kwargs)
                if weights is not None:
                    load_weights(fn, weights)
                    fn.train(train_mode)
                if grad:
                    inputs.update({name: p for name, p in fn.named_parameters()})
            else:
                fn = impl
            if kind == "class":
                result = call.args[0](impl(*call.init, **call.init_kwargs), *call.args[1:], **call.kwargs)
            else:
                result = fn(*call.args, **call.kwargs)
    except CheckTimeout as e:
        return Outcome(error=e)
    except Exception as e:  # the learner's code may raise anything
        return Outcome(error=e)
    outputs = as_tuple(result)
    if state_after:
        outputs = outputs + (state_of(call),)
    grads = None
    if grad and inputs:
        grads = _gradients(outputs, inputs)
    return Outcome(outputs=outputs, grads=grads)


def state_of(call):
    """The parameters and the mode (training or eval) of every module, the learning rate of every optimizer and
    the scale of every gradient scaler in a call's arguments."""
    state = {}
    for i, arg in enumerate(list(call.args) + list(call.kwargs.values())):
        if isinstance(arg, torch.nn.Module):
            state |= {f"parameter {name}": p.detach().clone() for name, p in arg.named_parameters()}
            state["model's mode, model.training,"] = arg.training
        elif isinstance(arg, torch.optim.Optimizer):
            state["the learning rate"] = arg.param_groups[0]["lr"]
        elif isinstance(arg, torch.amp.GradScaler) and arg.is_enabled():
            state["the gradient scaler's scale"] = arg.get_scale()
    return state


def _gradients(outputs, inputs):
    float_outputs = [o for o in outputs if isinstance(o, torch.Tensor) and o.is_floating_point()]
    if not float_outputs or not all(o.requires_grad for o in float_outputs):
        return "missing"
    g = torch.Generator().manual_seed(1234)
    names = list(inputs)
    try:
        weights = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device) for o in float_outputs]
        loss = sum((o * w).nansum() for o, w in zip(float_outputs, weights))
        grads = torch.autograd.grad(loss, [inputs[n] for n in names], allow_unused=True)
    except Exception as e:  # outputs on another device, a broken graph: reported after the outputs
        return StudentError(e)
    return dict(zip(names, grads))


class WeightMismatch(Exception):
    pass


def load_weights(student_module, weights):
    """Copy the reference's parameters (a state dict) into the learner's module, by name."""
    if not isinstance(student_module, torch.nn.Module):
        raise WeightMismatch(f"constructing it gave a {type(student_module).__name__}, not an nn.Module")
    ref = weights
    mine = student_module.state_dict()
    missing = sorted(set(ref) - set(mine))
    extra = sorted(set(mine) - set(ref))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(missing))
        if extra:
            parts.append("unexpected " + ", ".join(extra))
        raise WeightMismatch("its parameters should be " + ", ".join(sorted(ref)) + " (" + "; ".join(parts) + ")")
    for name, value in ref.items():
        if mine[name].shape != value.shape:
            reversed_ = mine[name].shape == value.shape[::-1] and value.ndim > 1
            raise WeightMismatch(
                f"parameter {name} has shape {tuple(mine[name].shape)}, expected {tuple(value.shape)}"
                + (": the same sizes in the reverse order, so the arguments that build it are swapped" if reversed_ else "")
            )
    student_module.load_state_dict(ref)


# ---------------------------------------------------------------- outcomes that travel


def plain(x):
    """x as tensors, numbers, strings, lists, tuples and dicts only: what autograder.wire carries out of
    the sandbox. Anything else travels as its type and repr, and comes back as an object of that type's name."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple, dict)):
        return {_plain_key(k): plain(v) for k, v in x.items()} if isinstance(x, dict) else type(x)(plain(v) for v in x)
    kind = next((k for k in (bool, int, float, str) if isinstance(x, k)), None)  # numpy's float64 is a float, say
    return x if x is None else kind(x) if kind else {FOREIGN: (type(x).__module__, type(x).__name__, repr(x)[:200])}


def _plain_key(k):
    """A dict key as a plain value (a tuple of them, say); another key as its type and repr, equal to no key of the reference."""
    if isinstance(k, tuple):
        return tuple(_plain_key(v) for v in k)
    if k is None or isinstance(k, (bool, str)):
        return k
    if isinstance(k, numbers.Integral):  # numpy's int64 too
        return int(k)
    if isinstance(k, numbers.Real):
        return float(k)
    return (FOREIGN, type(k).__module__, type(k).__name__, repr(k)[:200])


FOREIGN = "__autograder_foreign__"


def unplain(x):
    """plain()'s inverse, as far as comparing needs: a foreign value becomes an object of its type's name, equal to nothing."""
    if isinstance(x, dict) and set(x) == {FOREIGN} and isinstance(x[FOREIGN], tuple) and len(x[FOREIGN]) == 3:
        module, name, text = map(str, x[FOREIGN])
        return _named(name, object, module, __repr__=lambda self: text)()
    if isinstance(x, (list, tuple, dict)):
        return {k: unplain(v) for k, v in x.items()} if isinstance(x, dict) else type(x)(unplain(v) for v in x)
    return x


def _named(name, base, module=__name__, **attributes):
    return type(name if name.isidentifier() else "Unknown", (base,), {"__module__": module, **attributes})


def outcome_to_plain(outcome):
    """An Outcome as plain data (autograder.record sends it out of the sandbox this way)."""
    if outcome.error is not None:
        return {"error": (type(outcome.error).__name__, str(outcome.error))}
    grads = {"__error__": str(outcome.grads)} if isinstance(outcome.grads, StudentError) else outcome.grads
    return {"outputs": plain(outcome.outputs), "grads": plain(grads)}


def outcome_from_plain(data):
    """The Outcome that outcome_to_plain wrote, an error as its kind (by name). Anything malformed
    (the learner's code may have written it) becomes an error."""
    if not isinstance(data, dict):
        return Outcome(error=RuntimeError("its results were malformed"))
    if "error" in data:
        name, message = map(str, data["error"]) if isinstance(data["error"], tuple) and len(data["error"]) == 2 else ("", "")
        known = {"CheckTimeout": CheckTimeout, "WeightMismatch": WeightMismatch}.get(name) or getattr(builtins, name, None)
        if isinstance(known, type) and issubclass(known, Exception):  # never call anything else the data names
            try:
                return Outcome(error=known(message))
            except Exception:  # one that takes other arguments
                pass
        return Outcome(error=_named(name, RuntimeError)(message))
    outputs, grads = unplain(data.get("outputs")), unplain(data.get("grads"))
    if isinstance(grads, dict) and "__error__" in grads:
        grads = StudentError(RuntimeError(str(grads["__error__"])))
    elif not (grads is None or grads == "missing" or isinstance(grads, dict)):
        grads = StudentError(RuntimeError("its gradients were malformed"))
    return Outcome(outputs=tuple(outputs) if isinstance(outputs, (list, tuple)) else (outputs,), grads=grads)


# ---------------------------------------------------------------- comparing


def _fmt(x):
    return f"{x:.4g}"


_PLURAL = {"is": "are", "has": "have", "differs": "differ", "contains": "contain", "lacks": "lack"}


def _v(what, verb):
    """`verb` agreeing with the thing `what` names: "the output is", "the weights are"."""
    head = what.split(" of ")[0].split(" for ")[0].split("[")[0].split()[-1]
    return _PLURAL[verb] if head.endswith("s") and not head.endswith("ss") else verb


def compare_tensor(what, got, want):
    """Return '' when `got` matches `want`, else one sentence saying how it differs."""
    if not isinstance(got, torch.Tensor):
        kind = type(got).__module__ + "." + type(got).__name__ if type(got).__module__ != "builtins" else type(got).__name__
        return f"{what} {_v(what, 'is')} a {kind}, expected a torch.Tensor"
    if got.shape != want.shape:
        return f"{what} {_v(what, 'has')} shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"{what} {_v(what, 'has')} dtype {got.dtype}, expected {want.dtype}"
    if got.device != want.device:
        return f"{what} {_v(what, 'is')} on {got.device}, expected {want.device}"
    if want.dtype == torch.bool or not want.is_floating_point():
        wrong = (got != want).sum().item()
        return f"{what} {_v(what, 'differs')} in {wrong} of {want.numel()} entries" if wrong else ""
    got, want = got.detach(), want.detach()
    bad_got = ~torch.isfinite(got)
    bad_want = ~torch.isfinite(want)
    if bool((bad_got & ~bad_want).any()):
        n = int((bad_got & ~bad_want).sum())
        kind = "NaN" if bool(torch.isnan(got).any()) else "inf"
        return f"{what} {_v(what, 'contains')} {kind} in {n} entries where the reference is finite"
    atol, rtol = TOLERANCES.get(want.dtype, (1e-5, 1e-4))
    diff = (got - want).abs().nan_to_num(0.0)
    limit = atol + rtol * want.abs().nan_to_num(0.0)
    if bool((diff > limit).any()):
        return f"{what} {_v(what, 'is')} off by up to {_fmt(diff.max().item())} (tolerance {_fmt(atol)} + {_fmt(rtol)}·|expected|)"
    return ""


def _type_name(x):
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _short(x):
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _entry_name(what, key):
    """How to call entry `key` of the dict `what`: "the parameter W.weight after the step" for the
    state a training step leaves (autograder.core.state_of), else what[key]."""
    if what.startswith("the state after") and isinstance(key, str):
        return ("" if key.startswith("the ") else "the ") + key + what.removeprefix("the state")
    return f"{what}[{key!r}]"


def compare_value(what, got, want):
    """Like compare_tensor, for any value: tensors, numbers, strings, lists, tuples, dicts."""
    if isinstance(want, torch.Tensor):
        return compare_tensor(what, got, want)
    if isinstance(want, bool) or want is None or isinstance(want, str):
        if type(got) is not type(want):
            return f"{what} {_v(what, 'is')} a {_type_name(got)}, expected a {_type_name(want)}"
        return "" if got == want else f"{what} {_v(what, 'is')} {_short(got)}, expected {_short(want)}"
    if isinstance(want, (int, float)):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"{what} {_v(what, 'is')} a {_type_name(got)}, expected a number"
        if isinstance(want, int) and not isinstance(got, int):
            return f"{what} {_v(what, 'is')} {got!r}, expected the integer {want}"
        if math.isnan(want) and math.isnan(got) or got == want:
            return ""
        if abs(got - want) <= 1e-6 + 1e-6 * abs(want):
            return ""
        return f"{what} {_v(what, 'is')} {got:.6g}, expected {want:.6g}"
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            return f"{what} {_v(what, 'is')} a {_type_name(got)}, expected a {_type_name(want)}"
        if len(got) != len(want):
            return f"{what} {_v(what, 'has')} {len(got)} items, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            problem = compare_value(f"item {i} of {what}", g, w)
            if problem:
                return problem
        return ""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{what} {_v(what, 'is')} a {_type_name(got)}, expected a dict"
        missing, extra = [k for k in want if k not in got], [k for k in got if k not in want]
        if missing:
            return f"{what} {_v(what, 'lacks')} the key(s) {', '.join(map(_short, missing[:3]))}"
        if extra:
            return f"{what} {_v(what, 'has')} unexpected key(s) {', '.join(map(_short, extra[:3]))}"
        for k, w in want.items():
            problem = compare_value(_entry_name(what, k), got[k], w)
            if problem:
                return problem
        return ""
    return "" if got == want else f"{what} {_v(what, 'is')} {_short(got)}, expected {_short(want)}"


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


def _parameter_names(impl, kind):
    """The names of the arguments `impl` (or its forward) takes, as far as they can be read."""
    if kind == "class":
        return ["what the check does"]
    try:
        target = impl.forward if kind == "module" else impl
        return [p for p in inspect.signature(target).parameters if p != "self"]
    except (TypeError, ValueError, AttributeError):
        return []


def describe_inputs(call, names=()):
    """Lines describing a case's inputs: shapes and dtypes, and the values of small tensors."""
    def one(name, x):
        if isinstance(x, torch.Tensor):
            text = f"{name}: {tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}"
            if x.numel() <= 12:
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


# ---------------------------------------------------------------- one exercise


def _forward_only(case):
    return Case(case.label, case.make, case.part, case.hidden, grad=False, raises=case.raises)


def reference_module(exercise, case):
    if exercise.kind != "module":
        return None
    torch.manual_seed(0)
    call = case.make()
    return exercise.reference(*call.init, **call.init_kwargs)


def reference_outcome(exercise, case):
    """(the reference's outcome on `case`, the weights a module exercise starts from)."""
    if case.expected is not None:
        return case.expected, case.weights
    ref_module = reference_module(exercise, case)
    want = run(exercise, exercise.reference, case, ref_module)
    if case.raises is not None and not _raised(want, case.raises):
        raise RuntimeError(f"the reference should raise {case.raises} on case {case.label!r}, and did not")
    if want.error is not None and case.raises is None:
        raise RuntimeError(f"the reference failed on case {case.label!r}: {want.error!r}") from want.error
    return want, ref_module.state_dict() if ref_module is not None else None


def mistake_outcome(exercise, mistake, case):
    """What a catalogued mistake computes on `case`, forward only."""
    if case.mistake_outcomes is not None:
        return case.mistake_outcomes[mistake.name]
    return run(exercise, mistake.impl, _forward_only(case), reference_module(exercise, case))


def diagnose(exercise, failed):
    """The known mistake that reproduces the learner's output on the most failed cases, the first among
    them: the one the learner is shown (a mistake that is right where the learner is wrong is no name for it).

    `failed` is a list of (case, learner's outcome). Ties go to the mistake
    listed first in the catalog.
    """
    best, best_hits = None, 0
    for mistake in exercise.mistakes:
        hits = 0
        for i, (case, outcome) in enumerate(failed):
            same = same_outputs(outcome, mistake_outcome(exercise, mistake, case))
            if i == 0 and not same:
                break
            hits += same
        if hits > best_hits:
            best, best_hits = mistake, hits
    return best


def _raised(outcome, name):
    """Whether the outcome is an exception of class `name` or of a subclass of it (by name: it may have
    come out of the grading sandbox)."""
    return outcome.error is not None and name in [c.__name__ for c in type(outcome.error).__mro__]
