"""One mistake is charged once, and code that only calls a wrong exercise earns nothing from it.

An exercise that uses earlier ones of its notebook (its `depends_on`) is also run, in the
sandbox, with those earlier exercises replaced by stand-ins (autograder.record.Served)
that answer with the reference's answers; the grader then judges it on its own code
(autograder.grading.verdict) when an earlier one it used is wrong. The answers come
from here: `recordings` runs the reference of every such exercise on each of its cases
with the earlier exercises wrapped, and records every call it makes into them (a
function's arguments and result; a module's construction, weights, inputs and output;
an object's attributes and method calls, in each state it passes through). `Oracle`
serves a sandbox over a Unix socket: a request whose arguments match a recorded call of
that case, within the checks' tolerances, gets that call's answer, and a request for
gradients gets the reference's, computed at that call; anything else gets a refusal.
Each call and build is recorded with torch's random state before and after it: a request
made from the state before gets the state after too, which the stand-in leaves the
generator in, so the dropout masks drawn after it are the reference's; and the gradients
are computed again from the state before, with the masks the call drew.
The learner's code thus gets an answer only for the very inputs the reference would
have passed, which it has to compute itself. A function's calls whose arguments hold no
float and no tensor (notebook 09's ids) are looked up by their exact form rather than
tried one by one, and a call that drew no random numbers, changed no argument and
returned no tensor is marked `repeatable`: the stand-in answers the same request again
itself (train_bpe asks merge_pair the same two times in three).
"""
from __future__ import annotations

import bisect
import contextlib
import copy
import functools
import inspect
import itertools
import os
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field

import torch

from autograder.checks import comparing, running, travel
from autograder import registry, wire
from autograder.checks.charging import own_right
from autograder.record import _stateful, portable, rng_state, set_rng_state

MAX_REQUESTS = 200_000  # per sandbox: far more than any notebook's checks make


@dataclass
class Recorded:
    """One call the reference made into an earlier exercise, on one case."""
    dep: str
    op: str  # "build", "call" or "get"
    bound: dict  # the call's arguments by name, as plain values (what a request must match)
    state: object = None  # a module's weights, or an object's attributes, before the call
    answer: dict = field(default_factory=dict)  # what the request gets
    recompute: object = None  # () -> (float outputs, float inputs by name, then weights): the gradients' graph
    training: bool = False
    rng: tuple = None  # (torch's random state before the call or build, after it), as autograder.record.rng_state


_recordings = {}


def recordings(notebook):
    """{exercise: [[Recorded, ...] for each case]} for the exercises of `notebook` that use earlier ones."""
    if notebook not in _recordings:
        _recordings[notebook] = {ex.name: [_record(ex, case) for case in ex.cases()]
                                 for ex in registry.for_notebook(notebook) if ex.depends_on}
    return _recordings[notebook]


_mistaken = {}


def mistaken(exercise, case):
    """[Recorded, ...]: the calls each catalogued mistake of `exercise` makes into the earlier exercises on
    its case number `case`, answered by the reference. Served too, so that a learner whose exercise and an
    earlier one are both wrong still hears which mistake their own code makes (made when first needed)."""
    if (exercise, case) not in _mistaken:
        ex = registry.get(exercise)
        _mistaken[(exercise, case)] = [c for m in ex.mistakes for c in _record(ex, ex.cases()[case], m.impl)]
    return _mistaken[(exercise, case)]


_RNG = threading.RLock()  # torch's random state is the process's: one user at a time (the socket's threads)


def _record(ex, case, impl=None):
    """The calls the reference (or `impl`, one of its mistakes, which may fail) makes into earlier exercises on `case`."""
    calls = []
    with _RNG, _random_state_kept():
        ref = running.reference_module(ex, case)
        weights = ref.state_dict() if ref is not None else None
        call = case.make()  # before the recorders: the sandbox gets a case's inputs made (notebook 09's train merges)
        wrapped = {dep: _recorder(dep, _real(dep), calls) for dep in ex.depends_on}
        with in_place(wrapped):
            done = running.run_call(ex.kind, ex.train_mode, impl or ex.reference, call, False, weights, None, ex.state_after)
    if done.error is not None and impl is None:
        raise RuntimeError(f"recording {ex.name} [{case.label}] failed: {done.error!r}") from done.error
    return calls


@contextlib.contextmanager
def _random_state_kept():
    """torch's random state as it was, once the code inside is done."""
    kept = rng_state()
    try:
        yield
    finally:
        set_rng_state(kept)


def _same_rng(a, b):
    """Whether two random states (autograder.record.rng_state's) are the same, exactly."""
    def same(x, y):
        return isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)

    return (isinstance(a, dict) and isinstance(b, dict) and same(a.get("cpu"), b.get("cpu"))
            and isinstance(a.get("cuda"), list) and isinstance(b.get("cuda"), list) and len(a["cuda"]) == len(b["cuda"])
            and all(same(x, y) for x, y in zip(a["cuda"], b["cuda"])))


def _exact(x):
    """A hashable form of a plain value, the same for two values exactly when comparing.same_value holds between
    them without a tolerance; None for a value that holds a float, a tensor, or a dict not keyed by names. An int or
    a str is its own form (no wrapper per item: a request of millions of ids costs no more memory than itself)."""
    if type(x) in (int, str):
        return x
    if x is None or type(x) is bool:  # True == 1 and hash(True) == hash(1): same_value tells them apart, so does this
        return "constant", x
    if isinstance(x, (list, tuple)):  # same_value takes a list and a tuple of the same items as the same
        if set(map(type, x)) <= {int, str}:
            return "sequence", tuple(x)
        items = tuple(_exact(v) for v in x)
        return None if None in items else ("sequence", items)
    if isinstance(x, dict) and all(type(k) is str for k in x):
        items = {k: _exact(v) for k, v in x.items()}
        return None if None in items.values() else ("dict", frozenset(items.items()))
    return None


def _exact_index(calls):
    """{exact form of the arguments: [positions]} of a function's recorded calls, or None where one of them has no
    exact form (its arguments are then matched one call at a time, with the checks' tolerances)."""
    if not calls or calls[0].op != "call" or isinstance(_real(calls[0].dep), type):
        return None
    index = {}
    for i, rec in enumerate(calls):
        form = _exact(rec.bound)
        if form is None:
            return None
        index.setdefault(form, []).append(i)
    return index


def repeatable(rec):
    """Whether the stand-in may give a recorded call's answer again when asked the very same (autograder.record):
    a function's call that drew no random numbers, left its arguments as they were and returned no tensor."""
    return (rec.op == "call" and not isinstance(_real(rec.dep), type) and not rec.answer.get("after")
            and (rec.rng is None or _same_rng(*rec.rng)) and not running.tensors_in(rec.answer.get("result")))


def _real(dep):
    reference = registry.get(dep).reference
    return getattr(reference, "__wrapped__", reference)


@contextlib.contextmanager
def in_place(replacements):
    """The reference, for a while, with earlier exercises replaced wherever it uses them."""
    undo = []
    for module in [m for name, m in list(sys.modules.items()) if name.split(".")[0] == "solutions_lib" and m]:
        for name, new in replacements.items():
            obj = vars(module).get(name)
            if obj is not None and getattr(obj, "__module__", "").startswith("solutions_lib"):
                undo.append((module, name, obj))
                setattr(module, name, new)
    try:
        yield
    finally:
        for module, name, obj in undo:
            setattr(module, name, obj)


@functools.lru_cache(maxsize=256)
def _cached_signature(fn):
    return inspect.signature(fn)


def _signature(fn):
    """inspect.signature, kept: replay asks it of the same few functions tens of thousands of times (notebook 09)."""
    try:
        return _cached_signature(fn)
    except TypeError:  # unhashable
        return inspect.signature(fn)


def _bound(fn, args, kwargs, skip_self=False):
    """The arguments of a call by parameter name, defaults included (None when they do not fit)."""
    try:
        sig = _signature(fn)
        bound = sig.bind(*((None,) if skip_self else ()), *args, **kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    found = dict(bound.arguments)
    if skip_self:
        found.pop(next(iter(sig.parameters)))
    return found


def _plain_bound(fn, args, kwargs, skip_self=False):
    """_bound's arguments as plain values (autograder.record.portable), as requests carry them."""
    found = _bound(fn, args, kwargs, skip_self)
    return None if found is None else portable(found)


def _snapshot(x):
    """A copy of a call's arguments as they were before it (the call may change them)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_snapshot(v) for v in x)
    if isinstance(x, dict):
        return {k: _snapshot(v) for k, v in x.items()}
    if isinstance(x, torch.Generator):
        g = torch.Generator(device=x.device)
        g.set_state(x.get_state())
        return g
    if hasattr(x, "__dict__") and not isinstance(x, (type, torch.nn.Module)):  # an object: its attributes copied
        twin = copy.copy(x)
        vars(twin).update(_snapshot(vars(x)))
        return twin
    return copy.deepcopy(x)


def _after(args, kwargs):
    """The states the generators and objects among a call's arguments are left in (autograder.record.restore)."""
    return [x.get_state() if isinstance(x, torch.Generator) else portable(vars(x)) for x in _stateful((args, kwargs))]


def _graph(fn, args, kwargs, signature_of, skip_self=False, module=None, rng=None):
    """A closure that computes fn again on copies of the arguments, with gradients: (its float outputs,
    the float inputs in the order of fn's parameters, {name: parameter} of `module()`, whose forward is fn);
    None where no gradient can flow (no float tensor among the arguments, no module). `rng`: torch's random
    state the call started from, set again for it (once `module()` is built), so that dropout draws the same masks."""
    if module is None and not any(t.is_floating_point() for t in running.tensors_in((args, kwargs))):
        return None
    args, kwargs = _snapshot(args), _snapshot(kwargs)

    @torch.enable_grad()
    def recompute():
        a, k = _snapshot(args), _snapshot(kwargs)
        inputs = [t for t in running.tensors_in(list((_bound(signature_of, a, k, skip_self) or {}).values())) if t.is_floating_point()]
        for t in inputs:
            t.requires_grad_(True)
        with _RNG, _random_state_kept():  # building the module draws from it too: the state is set after
            built = module() if module is not None else None
            if rng is not None:
                set_rng_state(rng)
            out = (built.forward if built is not None else fn)(*a, **k)
        params = dict(built.named_parameters()) if built is not None else {}
        return [o for o in running.tensors_in(out) if o.is_floating_point()], inputs, params

    return recompute


class _Slot:
    def __init__(self, index):
        self.index = index


def _order(signature_of, args, kwargs, skip_self=False):
    """The positions, among a request's float tensors as it passed them (autograder.record's order), of
    the call's float tensors in the order of its parameters (the order `_graph` computes gradients in)."""
    if not any(t.is_floating_point() for t in running.tensors_in((args, kwargs))):
        return [], 0  # no gradient to route: notebook 09's calls, tens of thousands of them
    count = iter(range(2**62))

    def mark(x):
        if isinstance(x, torch.Tensor):
            return _Slot(next(count)) if x.is_floating_point() else x
        if isinstance(x, dict) and ("__object__" in x or "__generator__" in x):
            return None  # an object's or a generator's state: record.py passes no gradient into it
        if isinstance(x, (list, tuple)):
            return type(x)(mark(v) for v in x)
        if isinstance(x, dict):
            return {k: mark(v) for k, v in x.items()}
        return x

    def slots(x):
        if isinstance(x, _Slot):
            return [x.index]
        if isinstance(x, (list, tuple)):
            return [i for v in x for i in slots(v)]
        if isinstance(x, dict):
            return [i for v in x.values() for i in slots(v)]
        return []

    return slots(list((_bound(signature_of, mark(args), mark(kwargs), skip_self) or {}).values())), next(count)


def _recorder(dep, real, calls):
    if isinstance(real, type) and issubclass(real, torch.nn.Module):
        return _module_recorder(dep, real, calls)
    if isinstance(real, type):
        return _object_recorder(dep, real, calls)

    def recorder(*args, **kwargs):
        bound, before = _plain_bound(real, args, kwargs), rng_state()
        graph = _graph(real, args, kwargs, real, rng=before)
        result = real(*args, **kwargs)
        calls.append(Recorded(dep, "call", bound, answer={"result": travel.plain(result), "after": _after(args, kwargs)}, recompute=graph,
                              rng=(before, rng_state())))
        return result

    recorder.__name__ = dep
    return recorder


def _module_recorder(dep, real, calls):
    class Recording(real):
        def __init__(self, *args, **kwargs):
            before = rng_state()
            super().__init__(*args, **kwargs)
            after = rng_state()
            self._init = (_snapshot(args), _snapshot(kwargs))
            params = {name for name, _ in self.named_parameters()}
            state = [[k, v.detach().clone(), k in params] for k, v in self.state_dict().items()]
            calls.append(Recorded(dep, "build", _plain_bound(real.__init__, args, kwargs, skip_self=True), answer={"state": state},
                                  rng=(before, after)))

        def forward(self, *args, **kwargs):
            init, weights, training = self._init, {k: v.detach().clone() for k, v in self.state_dict().items()}, self.training

            def fresh():
                module = real(*init[0], **init[1])
                module.load_state_dict(weights)
                return module.train(training)

            bound, before = _plain_bound(real.forward, args, kwargs, skip_self=True), rng_state()
            graph = _graph(None, args, kwargs, real.forward, skip_self=True, module=fresh, rng=before)
            result = super().forward(*args, **kwargs)
            calls.append(Recorded(dep, "call", bound, state=portable(weights), training=training, recompute=graph,
                                  answer={"result": travel.plain(result), "after": _after(args, kwargs)}, rng=(before, rng_state())))
            return result

    Recording.__name__ = Recording.__qualname__ = real.__name__
    return Recording


def _object_recorder(dep, real, calls):
    class Proxy:
        def __init__(self, instance):
            object.__setattr__(self, "_real", instance)

        def __getattr__(self, attr):
            value, state = getattr(self._real, attr), portable(vars(self._real))
            if not callable(value):
                calls.append(Recorded(dep, "get", {"name": attr}, state=state, answer={"value": travel.plain(value)}))
                return value
            calls.append(Recorded(dep, "get", {"name": attr}, state=state, answer={"callable": True}))

            def method(*args, **kwargs):
                bound, rng = _plain_bound(value, args, kwargs), rng_state()
                before = _snapshot(self._real)
                graph = _graph(lambda *a, **k: getattr(_snapshot(before), attr)(*a, **k), args, kwargs, value, rng=rng)
                result = value(*args, **kwargs)
                calls.append(Recorded(dep, "call", {"method": attr, **bound}, state=state, recompute=graph, rng=(rng, rng_state()),
                                      answer={"result": travel.plain(result), "after": [portable(vars(self._real)), *_after(args, kwargs)]}))
                return result

            return method

        def __setattr__(self, attr, value):  # beam_generate reorders a cache's rows: cache.keys = [...]
            setattr(self._real, attr, value)

    def build(*args, **kwargs):
        before = rng_state()
        instance = real(*args, **kwargs)
        calls.append(Recorded(dep, "build", _plain_bound(real.__init__, args, kwargs, skip_self=True),
                              answer={"state": portable(vars(instance))}, rng=(before, rng_state())))
        return Proxy(instance)

    build.__name__ = dep
    return build


# ---------------------------------------------------------------- serving a sandbox


class Oracle:
    """Answers one sandbox's requests (autograder.record.Served) from the recordings of its notebook."""

    def __init__(self, notebook, verdicts=None):
        self.notebook = notebook
        self.verdicts = {} if verdicts is None else verdicts  # {exercise: its Report so far}, filled as the notebook runs
        self.given = []  # the calls answered, by id: a request for gradients names one
        self.requests = 0
        self._index, self._next = {}, {}  # a case's recorded calls by (exercise, case, dep, op); where to look first
        self._exact = {}  # by the same keys: _exact_index's
        self._server = None

    @property
    def book(self):
        return recordings(self.notebook)  # made at the first request that needs it: a right notebook never does

    def handle(self, request):
        """The answer to one request (plain values in, plain values out); a refusal for anything unexpected."""
        self.requests += 1
        if self.requests > MAX_REQUESTS:
            return {"miss": "too many requests"}
        try:
            return self._handle(request)
        except Exception as e:  # the request is the learner's: anything may be wrong with it
            return {"miss": f"{type(e).__name__}: {str(e)[:200]}"}

    def _handle(self, r):
        if not isinstance(r, dict):
            return {"miss": "not a request"}
        if r.get("op") == "vjp":
            return self._vjp(r)
        if r.get("op") == "wrong":  # which of the earlier exercises it used are wrong, as judged so far
            ex = registry.get(str(r.get("exercise")))
            used = r.get("used") if isinstance(r.get("used"), list) else []
            return {"wrong": [d for d in ex.depends_on if d in used and not own_right(self.verdicts.get(d))]}
        cases = self.book.get(r.get("exercise"))
        case = r.get("case")
        if cases is None or not isinstance(case, int) or not 0 <= case < len(cases):
            return {"miss": "no such exercise or case"}
        op, dep = r.get("op"), r.get("dep")
        sources = {"reference": lambda: cases[case], "mistakes": lambda: mistaken(r["exercise"], case)}
        for source, calls in sources.items():  # the reference's calls first, its catalogued mistakes' after
            key = (r["exercise"], case, dep, op, source)
            if key not in self._index:
                self._index[key] = [rec for rec in calls() if rec.dep == dep and rec.op == op]
            candidates, start = self._index[key], self._next.get(key, 0)  # code like the reference's asks in its order
            i = self._first_match(key, candidates, start, r)
            if i is not None:
                rec = candidates[i]
                self._next[key] = i + 1
                answer = dict(rec.answer)
                if rec.rng is not None and not _same_rng(*rec.rng) and _same_rng(r.get("rng"), rec.rng[0]):  # from where
                    answer["rng"] = rec.rng[1]  # the reference's call began: the stand-in leaves the generator where it left it
                if op == "call":
                    self.given.append((rec, self._order(rec, r), r.get("params", [])))
                    return {"id": len(self.given) - 1, **answer, **({"again": True} if repeatable(rec) else {})}
                return answer
        return {"miss": f"the reference never makes this {op} of {dep} on this case"}

    def _first_match(self, key, candidates, start, r):
        """The index of the first of `candidates` that request `r` matches, from `start` on, then from the first; or
        None. A function's calls whose arguments need no tolerance (ids, names: no float, no tensor) are looked up by
        their exact form; the rest are tried one by one."""
        if key not in self._exact:
            self._exact[key] = _exact_index(candidates)
        index = self._exact[key]
        if index is not None:
            args, kwargs = r.get("args", ()), r.get("kwargs", {})
            if not (isinstance(args, tuple) and isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs)):
                return None
            form = _exact(_plain_bound(_real(candidates[0].dep), args, kwargs))
            if form is not None:  # the same form exactly when same_value holds: no other call can match
                found = index.get(form)
                return None if found is None else found[bisect.bisect_left(found, start) % len(found)]
        return next((i for i in itertools.chain(range(start, len(candidates)), range(start)) if self._matches(candidates[i], r)), None)

    def _matches(self, rec, r):
        if rec.op == "get":
            return r.get("name") == rec.bound["name"] and comparing.same_value(r.get("state"), rec.state)
        real, args, kwargs = _real(rec.dep), r.get("args", ()), r.get("kwargs", {})
        if not (isinstance(args, tuple) and isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs)):
            return False
        if rec.op == "build":
            return comparing.same_value(_plain_bound(real.__init__, args, kwargs, skip_self=True), rec.bound)
        if isinstance(real, type) and issubclass(real, torch.nn.Module):
            return (r.get("training") == rec.training and comparing.same_value(r.get("state"), rec.state)
                    and comparing.same_value(_plain_bound(real.forward, args, kwargs, skip_self=True), rec.bound))
        if isinstance(real, type):
            method = getattr(real, str(r.get("method")), None)
            found = _plain_bound(method, args, kwargs, skip_self=True) if callable(method) else None
            return found is not None and comparing.same_value(r.get("state"), rec.state) and comparing.same_value({"method": r.get("method"), **found}, rec.bound)
        return comparing.same_value(_plain_bound(real, args, kwargs), rec.bound)

    @staticmethod
    def _order(rec, r):
        real = _real(rec.dep)
        if rec.op == "call" and isinstance(real, type) and issubclass(real, torch.nn.Module):
            return _order(real.forward, r.get("args", ()), r.get("kwargs", {}), skip_self=True)
        if isinstance(real, type):
            return _order(getattr(real, r.get("method")), r.get("args", ()), r.get("kwargs", {}), skip_self=True)
        return _order(real, r.get("args", ()), r.get("kwargs", {}))

    def _vjp(self, r):
        """The gradients of one answered call, for the cotangents `grads` of its float outputs: for each float
        tensor the request passed, in its order, then for the parameters it named."""
        call_id, grads = r.get("id"), r.get("grads")
        if not (isinstance(call_id, int) and 0 <= call_id < len(self.given) and isinstance(grads, list)):
            return {"miss": "no such call"}
        rec, (order, passed), names = self.given[call_id]
        if rec.recompute is None:
            return {"miss": "no gradient flows through this call"}
        outputs, inputs, params = rec.recompute()
        if len(grads) != len(outputs) or not all(isinstance(g, torch.Tensor) and g.shape == o.shape for g, o in zip(grads, outputs)):
            return {"miss": "gradients of the wrong shapes"}
        if not isinstance(names, list) or not all(isinstance(n, str) and n in params for n in names):
            return {"miss": "no such parameters"}
        wanted = inputs + [params[n] for n in names]
        pairs = [(o, g.to(o.dtype)) for o, g in zip(outputs, grads) if o.requires_grad]
        found = torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True) if pairs else [None] * len(wanted)
        by_position = [None] * passed
        for position, g in zip(order, found[:len(inputs)]):
            by_position[position] = g
        return {"grads": [None if g is None else g.detach() for g in by_position + list(found[len(inputs):])]}

    # ---- the socket

    def serve(self, path, max_bytes):
        """Listen on the Unix socket `path`, answering each connection's requests in a thread of its own."""
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(path))
        os.chmod(path, 0o777)  # the sandbox's user is another uid inside it
        self._server.listen(8)
        threading.Thread(target=self._accept, args=(self._server, max_bytes), daemon=True).start()

    def _accept(self, server, max_bytes):
        slots = threading.BoundedSemaphore(4)  # connections answered at once; the others wait
        while True:
            slots.acquire()
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn, max_bytes, slots), daemon=True).start()

    def _answer(self, conn, max_bytes, slots):
        with conn, _released(slots):
            try:
                while True:
                    head = _read(conn, 8)
                    if head is None:
                        return
                    (n,) = struct.unpack("<Q", head)
                    body = _read(conn, n) if n <= max_bytes else None
                    if body is None:
                        return
                    try:
                        reply = self.handle(wire.decode(body, max_bytes))
                    except wire.WireError as e:
                        reply = {"miss": f"unreadable request: {e}"}
                    data = _encoded(reply, max_bytes)
                    conn.sendall(struct.pack("<Q", len(data)) + data)
            except OSError:
                return

    def close(self):
        if self._server is not None:
            self._server.close()


@contextlib.contextmanager
def _released(semaphore):
    try:
        yield
    finally:
        semaphore.release()


def _encoded(reply, max_bytes):
    try:
        return wire.encode(reply, max_bytes)
    except wire.WireError as e:
        return wire.encode({"miss": f"the answer cannot be sent: {e}"})


def _read(conn, n):
    chunks = []
    while n:
        chunk = conn.recv(min(n, 2**20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class InProcess:
    """An Oracle asked directly, through the same plain values a socket carries (for the tests)."""

    def __init__(self, notebook, verdicts=None, max_bytes=64 * 2**20):
        self.oracle, self.max_bytes = Oracle(notebook, verdicts), max_bytes

    def ask(self, request):
        reply = self.oracle.handle(wire.decode(wire.encode(request), self.max_bytes))
        return wire.decode(_encoded(reply, self.max_bytes), self.max_bytes)

    def close(self):
        pass
