"""Known mistakes written as small edits of the reference's own source.

A catalog says what a learner typically gets wrong as an edit of the lesson's
code, not as a second copy of it (autograder/assignments/*.toml):

    [attention_scores]
    unscaled = { says = "you forgot to divide by sqrt(d_k); ...", swap = [" / math.sqrt(d_k)", ""] }

`mutant` applies the edit to the reference's source and compiles the result in
the reference module's namespace, so the mistake calls the same helpers the
reference calls. Its source stays readable (inspect.getsource
works, tracebacks show its lines), which the tests use to paste it into a
notebook as a learner would have typed it.
"""
from __future__ import annotations

import functools
import inspect
import linecache
import sys
import textwrap
from dataclasses import dataclass


class EditError(ValueError):
    """An edit no longer fits the reference it was written for."""


@dataclass(frozen=True)
class Edit:
    """Text replacements applied in order; `a & b` applies a, then b."""

    steps: tuple  # (old, new, every)

    def __and__(self, other):
        return Edit(self.steps + other.steps)

    def apply(self, source, where):
        for old, new, every in self.steps:
            n = source.count(old)
            if n == 0 or (n > 1 and not every):
                found = "not found" if n == 0 else f"found {n} times (say every=True, or quote more of the line)"
                raise EditError(f"{where}: {old!r} {found} in the reference")
            source = source.replace(old, new)
        return source


def swap(old, new="", every=False):
    """Replace `old` (which must occur exactly once, or at least once when `every`) by `new`."""
    return Edit(((old, new, every),))


def mutant(reference, edit, label):
    """The reference (a function or class) with `edit` applied to its source: a new object of the same name."""
    source = edit.apply(_reference_source(reference), label)
    filename = f"<mistake {label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    # Compiled in the reference module's own namespace, so that the mistake sees what the
    # reference sees, also when the grader records the calls the reference makes into earlier
    # exercises (autograder.grading.replay.in_place); the reference's own name is put back at once.
    namespace = vars(sys.modules[reference.__module__])
    kept = dict(namespace)
    try:
        exec(compile(source, filename, "exec"), namespace)
        made = namespace[reference.__name__]
    finally:  # the module as it was: whatever else the source defined or replaced is put back too
        for name in set(namespace) - set(kept):
            del namespace[name]
        namespace.update((name, value) for name, value in kept.items() if namespace.get(name) is not value)
    if made is kept[reference.__name__]:
        raise EditError(f"{label}: the edited source does not define {reference.__name__}")
    made.__qualname__ = f"{reference.__qualname__} ({label})"  # inspect.getsource of a class would find the reference's
    made.__mutant_source__ = source
    return made


@functools.cache
def _reference_source(reference):
    """The reference's own source, read once for all of its mistakes: a class's is found by parsing its whole module."""
    return textwrap.dedent(inspect.getsource(reference))


def source_of(obj):
    """The source of a function or class, made by `mutant` or written in a file."""
    return getattr(obj, "__mutant_source__", None) or textwrap.dedent(inspect.getsource(obj))
