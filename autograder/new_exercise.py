"""`python -m autograder new-exercise NOTEBOOK NAME --after EXERCISE`: a new exercise's cells, catalog entry and
TOML table, from its reference (a function or class NAME, written first in solutions_lib); and, with `--check`,
what an exercise still lacks.

The notebook gets, after EXERCISE's check cell: the heading, the hints' skeleton, the solution cell (the
reference's code, its body between the nbgrader markers) and the locked check cell; its headings are renumbered
and its introduction's table of exercises rewritten (`autograder.release.lay_out`, which the release runs too).
The catalog aNN_name.py gets `Exercise(...)` after EXERCISE's and a skeleton of its cases; aNN_name.toml an empty
table for its mistakes. What the skeletons leave to write is marked TODO, and `--check` lists it.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import types
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell

from autograder import registry
from autograder.checks.driver import check_exercise
from autograder.course import CourseError, assignments
from autograder.mutants import source_of
from autograder.release import HEADING, HINT, is_solution, lay_out

TODO = "TODO"


def add(root, notebook, name, after, kind=None, points=1, difficulty=1, minutes=10):
    """Add exercise `name` to `notebook` after exercise `after`; returns the files it changed."""
    root, notebook = Path(root), full_name(root, notebook)
    names = [ex.name for ex in registry.for_notebook(notebook)]
    if name in {ex.name for ex in registry.all_exercises()}:
        raise CourseError(f"there is already an exercise named {name!r}; names are unique across the course")
    if after not in names:
        raise CourseError(f"{notebook} has no exercise {after!r}; its exercises: {', '.join(names)}")
    module, reference = find_reference(root, name)
    kind = kind or ("function" if not inspect.isclass(reference) else "module" if hasattr(reference, "forward") else "class")

    path = root / "solutions" / notebook / f"{notebook}.ipynb"
    nb = nbformat.read(path, as_version=4)
    at = next((i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == f"check_{after}"), None)
    if at is None:
        raise CourseError(f"{path} has no check cell check_{after}")
    nb.cells[at + 1:at + 1] = cells(nb, name, reference, points, difficulty, minutes)
    lay_out(nb, names + [name], where=str(path))
    catalog = root / "autograder" / "assignments" / f"a{notebook}.py"
    module_text = with_exercise(catalog.read_text(), importlib.import_module(f"autograder.assignments.a{notebook}"),
                                name, after, module, reference, kind, points)
    toml = catalog.with_suffix(".toml")
    nbformat.write(nb, path)
    catalog.write_text(module_text)
    toml.write_text(toml.read_text().rstrip("\n") + f"\n\n[{name}]\n")
    return [path, catalog, toml]


def full_name(root, notebook):
    """NN_name from NN_name or NN."""
    found = [a for a in assignments(root) if notebook in (a, a[:2])]
    if not found:
        raise CourseError(f"no notebook {notebook!r} in solutions/; the notebooks: {', '.join(assignments(root))}")
    return found[0]


def find_reference(root, name):
    """(module name, object): the function or class `name` defined at the top of a module of solutions_lib."""
    for path in sorted((Path(root) / "solutions_lib").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(getattr(node, "name", None) == name for node in tree.body):
            module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            return module, getattr(importlib.import_module(module), name)
    raise CourseError(f"no function or class {name!r} in solutions_lib: write the reference first, in the topic's "
                      "module, with its shapes in the docstring (CONTRIBUTING.md)")


def with_markers(source):
    """A solution cell from the reference's source: the body of the function, or of each method of the class,
    after its docstring (and a class's super().__init__()), between the nbgrader markers."""
    lines = source.splitlines()
    top = ast.parse(source).body[0]
    functions = [top] if isinstance(top, ast.FunctionDef) else [n for n in top.body if isinstance(n, ast.FunctionDef)]
    for f in reversed(functions):
        given = f.body[:1] if _docstring(f.body[0]) else []
        if len(f.body) > len(given) and ast.unparse(f.body[len(given)]).startswith("super().__init__("):
            given.append(f.body[len(given)])
        body = f.body[len(given):]
        if not body:
            continue
        indent = " " * body[0].col_offset
        lines.insert(body[-1].end_lineno, indent + "### END SOLUTION")
        lines.insert(given[-1].end_lineno if given else body[0].lineno - 1, indent + "### BEGIN SOLUTION")
    return "\n".join(lines)


def _docstring(statement):
    return isinstance(statement, ast.Expr) and isinstance(getattr(statement.value, "value", None), str)


def cells(nb, name, reference, points, difficulty, minutes):
    """The heading, the hints, the solution cell and the check cell of a new exercise, with ids unused in `nb`."""
    dots = " ".join("●" * difficulty + "○" * (3 - difficulty))
    new = [
        new_markdown_cell(f"### Exercise 0 · `{name}` (difficulty {dots}, about {minutes} minutes)\n\n"
                          f"{TODO}: what to write, and what the check compares."),
        new_markdown_cell(f"<details><summary>Hint 1 · the idea</summary>\n\n{TODO}: the idea, in a sentence or two.\n\n</details>\n"
                          f"<details><summary>Hint 2 · the approach</summary>\n\n{TODO}: the approach, with the key PyTorch "
                          "call in code font (`torch...`).\n\n</details>"),
        new_code_cell(with_markers(source_of(reference))),
        new_code_cell(f'check("{name}", {name})'),
    ]
    new[2].metadata["nbgrader"] = {"grade": False, "grade_id": name, "locked": False, "schema_version": 3, "solution": True, "task": False}
    new[3].metadata["nbgrader"] = {"grade": True, "grade_id": f"check_{name}", "locked": True, "points": points,
                                   "schema_version": 3, "solution": False, "task": False}
    taken = {c.get("id") for c in nb.cells}
    for cell in new:
        while cell.id in taken:
            cell.id = new_code_cell().id
    return new


def with_exercise(text, catalog, name, after, module, reference, kind, points):
    """The catalog module's source with `name`'s case skeleton and its `Exercise(...)` after `after`'s."""
    tree = ast.parse(text)
    listing = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "EXERCISES")
    previous = next(e for e in listing.value.elts if isinstance(e.args[0], ast.Constant) and e.args[0].value == after)
    alias = next((f"{a}.{name}" for a, m in vars(catalog).items() if isinstance(m, types.ModuleType) and getattr(m, name, None) is reference), None)
    lines = text.splitlines()
    extra = "" if kind == "function" else f', kind="{kind}"'
    lines.insert(previous.end_lineno, f'    Exercise("{name}", {alias or name}, points={points:g}, cases={name}_cases{extra}),')
    heading = max((i for i, line in enumerate(lines[:listing.lineno]) if line.startswith("# ") and line.endswith(" the exercises")),
                  default=listing.lineno - 1)
    signature = f"{name}{inspect.signature(reference)}" + (f", forward{inspect.signature(reference.forward)}" if kind == "module" else "")
    init = ", init=(), init_kwargs={}" if kind == "module" else ""
    lines[heading:heading] = f"""# ---------------------------------------------------------------- {name}


def {name}_cases():
    # {TODO}: the inputs of {signature}, made afresh from a fixed seed by each make()
    # (autograder.inputs.Draw(seed)): several shapes and batch sizes, float32 and float64; a hidden case in
    # every part; and public cases on which each mistake in the TOML file's [{name}] differs from the reference.
    def make():
        return Call((){init})

    return [Case("{TODO}", make), Case("{TODO}", make, hidden=True)]


""".splitlines()
    if alias is None:
        last_import = max(n.end_lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
        lines.insert(last_import, f"from {module} import {name}")
    return "\n".join(lines) + "\n"


def missing(root, notebook, name):
    """What exercise `name` of `notebook` still lacks, in sentences; empty when nothing does."""
    notebook = full_name(root, notebook)
    try:
        ex = registry.get(name)
    except KeyError:
        return [f"{name} is not in the catalog: add it with `python -m autograder new-exercise {notebook} {name} --after EXERCISE`"]
    if ex.notebook != notebook:
        return [f"{name} is an exercise of {ex.notebook}, not of {notebook}"]
    cases = ex.cases()
    try:
        lacks = [f"the reference fails its own case {r.case.label!r}: {r.problem}"
                 for r in check_exercise(ex, ex.reference, hidden=True).failures()]
    except RuntimeError as e:  # the reference raised: the cases' inputs are not its arguments
        lacks = [f"{e}; write its cases in a{notebook}.py"]
    reference_fails = bool(lacks)
    lacks += [f"no public case{'' if part == 'main' else f' in part {part!r}'}" for part in ex.part_weights()
              if not any(c.part == part and not c.hidden for c in cases)]
    lacks += [f"no hidden case{'' if part == 'main' else f' in part {part!r}'}: a part without one can be passed by copying "
              "the public answers" for part in ex.part_weights() if not any(c.part == part and c.hidden for c in cases)]
    if not ex.mistakes:
        lacks.append(f"no catalogued mistake in a{notebook}.toml [{name}]")
    for m in [] if reference_fails else ex.mistakes:
        public = check_exercise(ex, m.impl)
        if public.fraction == 1.0:
            lacks.append(f"the mistake {m.name} is not caught on a public case: add a public case on which it differs from the reference")
        elif public.failures()[0].diagnosis != m.says:
            lacks.append(f"the mistake {m.name} is named otherwise on the public cases, which a learner sees before grading: "
                         f"{public.failures()[0].diagnosis!r}; add a public case that tells them apart")
    nb = nbformat.read(Path(root) / "solutions" / notebook / f"{notebook}.ipynb", as_version=4)
    at = next((i for i, c in enumerate(nb.cells) if is_solution(c) and c.metadata["nbgrader"]["grade_id"] == name), None)
    if at is None:
        return lacks + [f"solutions/{notebook} has no solution cell {name}"]
    above = nb.cells[at - 1].source if nb.cells[at - 1].cell_type == "markdown" else ""
    tiers = [int(n) for n, _ in HINT.findall(above)]
    if tiers[:2] != [1, 2]:
        lacks.append("hints missing: at least two tiers (the idea, then the approach with the key call) in the markdown cell just above the solution cell")
    heading = next((c.source for c in nb.cells if c.cell_type == "markdown" and any(m[2] == name for m in HEADING.finditer(c.source))), "")
    if not heading:
        lacks.append("no heading `### Exercise k · `name` (difficulty ● ○ ○, about 10 minutes)`")
    if TODO in above or TODO in heading:
        lacks.append("its text or hints still say TODO")
    return lacks
