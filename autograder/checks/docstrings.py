"""What a docstring says of shapes: "x: (B, T, d)" for an argument, "-> scores: (B, T)" for what comes back.
The diagnoses name axes with it (B, T, d_k) rather than numbers."""
from __future__ import annotations

import inspect
import re


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


def doc_shapes(obj):
    """{name: "(B, T, d)"} from the docstrings of a function, or of a class and its forward: "x: (B, T, d)"."""
    owners = [obj, getattr(obj, "forward", None)] if inspect.isclass(obj) else [obj]
    shapes = {}
    for owner in owners:
        doc = getattr(owner, "__doc__", None) if owner is not None else None
        for names, shape in re.findall(r"([\w\[\].]+(?:, [\w\[\].]+)*): (\([^()]*\))", doc if isinstance(doc, str) else ""):
            for name in names.split(", "):
                shapes.setdefault(name, shape)
    return shapes
