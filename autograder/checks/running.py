"""Running code on a case: the learner's function or module and the reference on fresh inputs, under a time
limit, with the reference's weights copied into the learner's module; what it returned (a model's parameters by
name), its gradients and, for a training step, the state it left."""
from __future__ import annotations

import contextlib
import inspect
import signal
import threading
import time

import torch

from autograder.checks.cases import CheckTimeout, Case, DEFAULT_TIMEOUT_S, Outcome, StudentError, WeightMismatch, raised
from autograder.wire import only_scalars


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


def tensors_in(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [] if only_scalars(obj) else [t for o in obj for t in tensors_in(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in tensors_in(o)]
    return []


def gradients_in(call):
    """[(tensor, its .grad)] for the tensors and parameters of a call's arguments."""
    tensors = tensors_in((call.args, call.kwargs))
    for arg in list(call.args) + list(call.kwargs.values()):
        if isinstance(arg, torch.nn.Module):
            tensors += list(arg.parameters())
        elif isinstance(arg, torch.optim.Optimizer):
            tensors += [p for group in arg.param_groups for p in group["params"]]
    return [(t, t.grad) for t in tensors if t.grad is not None]


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
    train_mode = train_mode if call.train is None else call.train
    inputs = {}
    if grad:
        for i, t in enumerate(tensors_in((call.args, call.kwargs))):
            if t.is_floating_point():
                t.requires_grad_(True)
                inputs[f"input {i}"] = t
    try:
        with time_limit(timeout):
            if kind == "module":
                if call.as_built:
                    torch.manual_seed(call.seed or 0)
                    if not inspect.isclass(impl):  # a reference factory (a class is built as it is, whatever it carries)
                        impl = impl.__wrapped__
                fn = impl(*call.init, **call.init_kwargs)
                if weights is not None:
                    load_weights(fn, weights, keep=call.as_built)
                    fn.train(train_mode)
                if call.device is not None:
                    fn.to(call.device)
                if grad:
                    inputs.update({name: p for name, p in fn.named_parameters()})
            else:
                fn = impl
            if call.seed is not None:
                torch.manual_seed(call.seed)
            with layers_keep_to_meta(call.device == "meta" or any(t.device.type == "meta" for t in tensors_in((call.args, call.kwargs)))):
                if kind == "class":
                    result = call.args[0](impl(*call.init, **call.init_kwargs), *call.args[1:], **call.kwargs)
                else:
                    result = fn(*call.args, **call.kwargs)
    except CheckTimeout as e:
        return Outcome(error=e)
    except Exception as e:  # the learner's code may raise anything
        return Outcome(error=e)
    outputs = by_name(as_tuple(result), call) if kind == "function" else as_tuple(result)
    if state_after:
        outputs = outputs + (state_of(call),)
    grads = None
    if grad and inputs:
        grads = _gradients(outputs, inputs)
    return Outcome(outputs=outputs, grads=grads)


NOT_A_PARAMETER = "a tensor that is none of the model's parameters"


def by_name(outputs, call):
    """The outputs with each parameter of a module among the call's arguments as its name there, through lists and
    tuples: which parameters a function chose (notebook 11's split_parameters) compared by name and order, not by
    value. A parameter two names share (a tied head) goes by the first, as named_parameters() lists it; another tensor
    in a list that holds parameters (a copy of one) is NOT_A_PARAMETER."""
    names = {id(p): name for arg in list(call.args) + list(call.kwargs.values()) if isinstance(arg, torch.nn.Module)
             for name, p in arg.named_parameters()}

    def named(x, among_parameters=False):
        if isinstance(x, torch.Tensor) and id(x) in names:
            return names[id(x)]
        if isinstance(x, torch.Tensor) and among_parameters:
            return NOT_A_PARAMETER
        if type(x) in (list, tuple):
            chosen = any(isinstance(v, torch.Tensor) and id(v) in names for v in x)
            return type(x)(named(v, chosen) for v in x)
        return x

    return named(outputs) if names else outputs


@contextlib.contextmanager
def layers_keep_to_meta(active):
    """In the device cases (inputs on PyTorch's meta device), a layer whose weights are on the meta device and that is
    handed a tensor from elsewhere raises, as it would on a GPU: an embedding's meta kernel looks up CPU indices
    without complaint (pos_embed(torch.arange(T)) made without device=), where CUDA raises."""
    if not active:
        yield
        return

    def check(module, args):
        weight = next(module.parameters(recurse=False), None)
        if weight is None or weight.device.type != "meta":
            return
        for x in tensors_in(args):
            if x.device != weight.device:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"{weight.device} and {x.device}! ({type(module).__name__} with its weights on "
                                   f"{weight.device} was handed a tensor on {x.device})")

    handle = torch.nn.modules.module.register_module_forward_pre_hook(check)
    try:
        yield
    finally:
        handle.remove()


def state_of(call):
    """The parameters and the mode (training or eval) of every module, the learning rate of every optimizer and
    the scale of every gradient scaler in a call's arguments."""
    state = {}
    for i, arg in enumerate(list(call.args) + list(call.kwargs.values())):
        if isinstance(arg, torch.nn.Module):
            state |= {f"parameter {name}": p.detach().clone() for name, p in arg.named_parameters()}
            state["model's mode, model.training,"] = arg.training
            if callable(getattr(arg, "what_it_saw", None)):  # a model that counts its calls (course_lib.gpt.TinyGPT)
                state |= arg.what_it_saw()
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


def load_weights(student_module, weights, keep=()):
    """Copy the reference's parameters (a state dict) into the learner's module, by name, all but those named in
    `keep`, which stay as the module was built."""
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
    student_module.load_state_dict({name: value for name, value in ref.items() if name not in keep}, strict=not keep)


def parameter_names(impl, kind):
    """The names of the arguments `impl` (or its forward) takes, as far as they can be read."""
    if kind == "class":
        return ["what the check does"]
    try:
        target = impl.forward if kind == "module" else impl
        return [p for p in inspect.signature(target).parameters if p != "self"]
    except (TypeError, ValueError, AttributeError):
        return []


def forward_only(case):
    return Case(case.label, case.make, case.part, case.hidden, grad=False, raises=case.raises)


def reference_module(exercise, case):
    if exercise.kind != "module":
        return None
    torch.manual_seed(0)
    call = case.make()
    return exercise.reference(*call.init, **call.init_kwargs)


def memo(case, key, compute):
    """compute(), worked out once per case and key: what the reference or a catalogued mistake computes on a case
    never changes, and a check asks for it again for every learner, every failed case and every mistake."""
    if key not in case.memo:
        case.memo[key] = compute()
    return case.memo[key]


def who(exercise):
    """What a memo of an exercise's outcomes depends on: a copy of the exercise with another reference shares the cases."""
    return (exercise.reference, exercise.kind, exercise.train_mode, exercise.state_after)


def reference_outcome(exercise, case):
    """(the reference's outcome on `case`, the weights a module exercise starts from)."""
    if case.expected is not None:
        return case.expected, case.weights
    return memo(case, ("reference", who(exercise)), lambda: _reference_outcome(exercise, case))


def _reference_outcome(exercise, case):
    ref_module = reference_module(exercise, case)
    want = run(exercise, exercise.reference, case, ref_module)
    if case.raises is not None and not raised(want, case.raises):
        raise RuntimeError(f"the reference should raise {case.raises} on case {case.label!r}, and did not")
    if want.error is not None and case.raises is None:
        raise RuntimeError(f"the reference failed on case {case.label!r}: {want.error!r}") from want.error
    return want, ref_module.state_dict() if ref_module is not None else None
