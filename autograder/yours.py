"""Your own building blocks from the earlier notebooks, once their checks pass.

    MultiHeadAttention, causal_mask = yours(MultiHeadAttention, causal_mask)

`yours(standin, ...)` looks up each stand-in's exercise (by its name) in your
saved notebook next to this one (`../NN_name/NN_name.ipynb`). When the check of
that exercise, and of every exercise it builds on, passed the last time you ran
it (a check cell keeps its result in the saved notebook), it runs that
notebook's setup cell, those solution cells and what the other cells define
(imports, functions, classes, constants; not their training runs), in a
namespace of their own, and hands you your object; otherwise the stand-in. It prints one line saying
which is in use, and why. The earlier blocks that notebook imports are yours
too where they pass, so notebook 08 trains your 07 Transformer on your 06
MultiHeadAttention and your 05 masks.

Under grading it always returns the stand-ins: a grade never depends on
another notebook.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import torch

from autograder import registry
from autograder.progress import check_cells
from course_lib.runtime import grading


class NotYours(Exception):
    """Why the learner's own version cannot be used (a short reason)."""


_running = []  # the _Finder whose notebook's setup cell is running (and may call yours itself)


def yours(*standins, folder=None):
    """Each stand-in, or your own object of the same name when its checks pass; prints which."""
    if _running:  # inside an earlier notebook's setup cell: the outer call decides, quietly
        return _running[-1].swap(standins)
    if grading():
        print(f"{_names(standins)}: the course's (a grader is running this notebook)")
        return standins[0] if len(standins) == 1 else standins
    found = _Finder(Path(folder) if folder else Path.cwd())
    chosen, mine, theirs = [], [], []
    for standin in standins:
        try:
            obj, notebook = found.own(standin.__name__)
            chosen.append(obj)
            mine.append(f"{standin.__name__} ({notebook[:2]})")
        except NotYours as e:
            chosen.append(standin)
            theirs.append(f"{standin.__name__} ({e})")
    used = sorted(found.used - {n for n in (s.__name__ for s in standins)})
    line = []
    if mine:
        line.append("yours: " + ", ".join(mine) + (f", with your {', '.join(used)}" if used else ""))
    if theirs:
        line.append("the course's: " + ", ".join(theirs))
    print("; ".join(line))
    return chosen[0] if len(chosen) == 1 else tuple(chosen)


def _names(objs):
    return ", ".join(o.__name__ for o in objs)


class _Finder:
    """Loads exercises from the learner's saved notebooks under one course folder, each once."""

    def __init__(self, here):
        self.here, self.loaded, self.used = here, {}, set()

    def path(self, notebook):
        for path in (self.here.parent / notebook / f"{notebook}.ipynb", self.here / f"{notebook}.ipynb"):
            if path.is_file():
                return path
        raise NotYours(f"no {notebook}.ipynb next to this notebook")

    def own(self, name):
        """(your object, its notebook), or NotYours with the reason."""
        try:
            ex = registry.get(name)
        except KeyError:
            raise NotYours("not an exercise of the course") from None
        if name not in self.loaded:
            path = self.path(ex.notebook)
            try:
                nb = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise NotYours(f"{path.name} cannot be read: {type(e).__name__}") from None
            needed = _with_dependencies(name)
            results = {ex_name: r for ex_name, _, r in check_cells(nb)}
            for dep in needed:
                r = results.get(dep)
                if not r or r.get("status") != "passed":
                    state = (f"not run yet in the saved {path.name}: run its check cells in Jupyter and save it, or run "
                             f"`python -m autograder check --save {path.name}` (without --save it grades the notebook "
                             "but does not write the results into it)") if r is None else r.get("status", "?")
                    raise NotYours(f"{ex.notebook[:2]}: the check of {dep} has not passed, {state}")
            self.loaded[name] = self.run(nb, needed, name, path)
        return self.loaded[name], ex.notebook

    def run(self, nb, needed, name, path):
        """Runs the notebook's setup cell, then in the notebook's order the solution cells of `needed` and
        the definitions of its given cells (the helpers your code may call), in a fresh namespace."""
        code = [(c.get("metadata", {}).get("nbgrader", {}).get("grade_id"), "".join(c.get("source", "")))
                for c in nb.get("cells", []) if c.get("cell_type") == "code"]
        setup = next((source for cell_name, source in code if cell_name == "setup"), "")
        namespace = {"__name__": f"yours_{path.stem}"}
        _running.append(self)
        with torch.random.fork_rng(devices=[]):  # the setup cell seeds; this notebook's random numbers stay as they were
            try:
                exec(compile(setup, f"{path.name}: setup", "exec"), namespace)
                self.swap_in(namespace, before=path.stem)
                for cell_name, source in code:
                    if cell_name in needed:
                        exec(compile(source, f"{path.name}: {cell_name}", "exec"), namespace)
                    elif cell_name is None:
                        _define(source, f"{path.name}: a given cell", namespace)
            except Exception as e:  # the learner's notebook, as saved: anything may fail in it
                raise NotYours(f"running {path.name} failed: {type(e).__name__}: {e}") from None
            finally:
                _running.pop()
        if name not in namespace:
            raise NotYours(f"{path.name} does not define {name}")
        return namespace[name]

    def swap(self, standins):
        chosen = []
        for standin in standins:
            try:
                chosen.append(self.own(standin.__name__)[0])
                self.used.add(standin.__name__)
            except NotYours:
                chosen.append(standin)
        return chosen[0] if len(chosen) == 1 else tuple(chosen)

    def swap_in(self, namespace, before):
        """The earlier notebooks' stand-ins that a setup cell imported, replaced by the learner's where they pass."""
        for key, obj in list(namespace.items()):
            if not (getattr(obj, "__module__", "").startswith("course_lib.") and hasattr(obj, "__name__")):
                continue
            try:
                if registry.get(obj.__name__).notebook < before:
                    namespace[key], _ = self.own(obj.__name__)
                    self.used.add(obj.__name__)
            except (KeyError, NotYours):
                pass


def _define(source, filename, namespace):
    """What a given cell defines for the cells after it, in the namespace: its imports, functions, classes and
    constants (NAME = a literal, as N_BYTES = 256); the rest of the cell (training, plots) is not run. A definition
    that fails (a class built on an exercise not loaded, say) is left out."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or _constant(node):
            try:
                exec(compile(ast.Module([node], type_ignores=[]), filename, "exec"), namespace)
            except Exception:  # noqa: BLE001 - a helper the learner's code does not need
                pass


def _constant(node):
    if not (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)):
        return False
    try:
        ast.literal_eval(node.value)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def load(names, folder):
    """{name: your object} for these exercises of your saved notebooks under `folder` (a notebook's folder);
    NotYours, with each reason, when any of them cannot be used. Quiet: the caller says what it uses."""
    found, objs, why = _Finder(Path(folder)), {}, []
    for name in names:
        try:
            objs[name] = found.own(name)[0]
        except NotYours as e:
            why.append(f"{name} ({e})")
    if why:
        raise NotYours(", ".join(why))
    return objs


def _with_dependencies(name):
    """The exercise and those it builds on, in the order of the notebook."""
    order = [ex.name for ex in registry.for_notebook(registry.get(name).notebook)]
    needed, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in needed:
            needed.add(n)
            todo += [d for d in registry.get(n).depends_on if d in order]
    return [n for n in order if n in needed]
