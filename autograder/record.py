"""Under grading, inside the sandbox: run the learner's code on the cases the grader sent, and hand back what it computed.

The grader (autograder.grading.verdict) wrote every case's inputs, hidden ones
included, to the file named by AUTOGRADER_CASES, and compares what comes back
with the reference outside the sandbox. Nothing here knows an expected output,
so nothing the learner's code does here can earn a point its own results do not.
"""
import base64
import contextlib
import functools
import io
import os
import sys

import torch

from autograder import core

CASES = "AUTOGRADER_CASES"
MIME = "application/vnd.seqcourse.outcomes+base64"
MAX_BYTES = 64 * 2**20  # a result larger than this is not sent back

_exercises = None


def grading():
    """True inside a grading sandbox (or a kernel graded with --no-sandbox)."""
    return bool(os.environ.get(CASES))


def outcomes(name, obj, namespace=None):
    """{"outcomes": what `obj` computes on each of exercise `name`'s cases, as plain data,
    "used": the exercises it uses that it reached through the notebook's names while doing so}."""
    global _exercises
    if _exercises is None:
        _exercises = torch.load(os.environ[CASES], weights_only=False)
    ex = _exercises[name]
    found, used = [], set()
    with watching(vars(sys.modules["__main__"]) if namespace is None else namespace, ex["depends_on"], used):
        for blob, grad, weights in ex["cases"]:
            call = core.restored_call(torch.load(io.BytesIO(blob), weights_only=False))
            o = core.run_call(ex["kind"], ex["train_mode"], obj, call, grad, weights, core.DEFAULT_TIMEOUT_S, ex["state_after"])
            found.append(core.outcome_to_plain(o))
            if isinstance(o.error, (NotImplementedError, core.CheckTimeout)):
                break  # the comparison stops at such a case too
    return {"outcomes": found, "used": sorted(used)}


@contextlib.contextmanager
def watching(namespace, names, used):
    """For a while, the notebook's `names` (earlier exercises) note in `used` when they are called."""
    saved = {n: namespace[n] for n in names if callable(namespace.get(n))}
    for n, obj in saved.items():
        namespace[n] = _noting(n, obj, used)
    try:
        yield
    finally:
        namespace.update(saved)


def _noting(name, obj, used):
    if isinstance(obj, type):
        def __init__(self, *args, **kwargs):
            used.add(name)
            obj.__init__(self, *args, **kwargs)

        return type(obj.__name__, (obj,), {"__init__": __init__, "__module__": obj.__module__})

    @functools.wraps(obj)
    def noted(*args, **kwargs):
        used.add(name)
        return obj(*args, **kwargs)

    return noted


def encode(data):
    buf = io.BytesIO()
    torch.save(data, buf)
    if buf.tell() > MAX_BYTES:
        return encode([{"error": ("ValueError", f"its result is too large to grade ({buf.tell() / 2**20:.0f} MB)")}])
    return base64.b64encode(buf.getvalue()).decode()


def record(name, obj):
    """The test cell's work under grading: show the grader what `obj` computes."""
    from IPython.display import display

    display({MIME: encode(outcomes(name, obj)), "text/plain": f"{name}: results sent to the grader"}, raw=True)
