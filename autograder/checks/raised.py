"""Where a learner's code raised: the line of their own code, the lines that called it, and the shape of each
tensor the line names beside the shape its docstring gives."""
from __future__ import annotations

import ast
import linecache
import re
import sysconfig
from pathlib import Path

import torch

from autograder.checks.cases import CheckTimeout
from autograder.checks.docstrings import doc_shapes
from autograder.checks.running import time_limit


_LIBRARIES = tuple(str(Path(p).resolve()) for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                                    sysconfig.get_paths()["platlib"], Path(torch.__file__).parent,
                                                    Path(__file__).parents[1], Path(__file__).parents[2] / "course_lib"})


MOST_NAMES = 8


def raised_at(error, impl, seconds=5):
    """Lines saying where the learner's own code raised `error`: the line, and the shape of each tensor it
    names beside the shape the docstring gives it; () when the traceback does not reach the learner's code.
    Reading the names runs the learner's attribute lookups and layers again: `seconds` bounds it."""
    try:
        with time_limit(seconds):
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
        if isinstance(getattr(node, "ctx", None), ast.Store) and not _augmented(tree, node):
            continue  # what the line assigns to still holds what an earlier line (a loop's last turn) gave it
        text = ast.unparse(node)
        if text in seen:
            continue
        seen.add(text)
        try:
            value = _evaluate(node, frame)
        except CheckTimeout:  # raised_at's limit: reading the line stops there
            raise
        except Exception:  # a name the frame does not have, an index out of range, a call that fails
            continue
        found.append((node.col_offset, -len(text), text, value))
    return [(text, value) for *_, text, value in sorted(found, key=lambda f: f[:2])]


def _augmented(tree, node):
    """Whether `node` is the target of an augmented assignment (x += ...), which reads it before it writes it."""
    return any(isinstance(n, ast.AugAssign) and n.target is node for n in ast.walk(tree))


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
    return doc_shapes(raised) | doc_shapes(impl)
