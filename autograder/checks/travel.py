"""Outcomes and inputs that travel: as plain data out of the grading sandbox (autograder.wire carries it), and
a case's inputs through torch.save with their gradients (the student distribution's data)."""
from __future__ import annotations

import builtins
import numbers

import torch

from autograder.checks.cases import CheckTimeout, Outcome, StudentError, WeightMismatch
from autograder.checks.running import gradients_in


def portable_call(call):
    """A call ready for torch.save, which drops every .grad (a training step's case may
    start with stale gradients); `restored_call` puts them back."""
    return {"call": call, "grads": gradients_in(call)}


def restored_call(stored):
    for tensor, grad in stored["grads"]:
        tensor.grad = grad
    return stored["call"]


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
