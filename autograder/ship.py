"""What a class is shipped: the check machinery, course_lib, and each notebook's checks computed in advance.

Both sides use it: `autograder.release.student_dist` writes it into the student
distribution, and `autograder.grading.views` into the folder the grading sandbox
shows a notebook's kernel. `leaks` makes sure that neither holds reference code.
"""
from __future__ import annotations

import ast
import inspect
import io
import pickletools
import shutil
import textwrap
import warnings
import zipfile
from pathlib import Path

import nbformat
import torch

from autograder.checks import catalogue, comparing, edits, relations, running, travel, variants
from autograder.checks.cases import Outcome
from autograder import registry
from autograder.course import cache_dir, digest, keep
from autograder.mutants import source_of
from autograder.reference_data import FORMAT

HELPERS = "course_lib"
REFERENCE = "solutions_lib"
# autograder modules the checks need in a notebook and on the command line (`check`), and the check machinery's folder
SHIPPED = ("__init__.py", "__main__.py", "api.py", "check_notebook.py", "course.py", "results.py",
           "pytest_plugin.py", "fixtures.py", "registry.py", "reference_data.py", "record.py",
           "progress.py", "reveal.py", "wire.py", "yours.py", "my_gpt.py", "checks")


class ShipError(Exception):
    """A notebook needs something the student distribution cannot contain."""


# ---------------------------------------------------------------- the precomputed checks


def exercise_data(ex):
    """One exercise's entry of autograder/data/NN_name.pt (format: autograder.reference_data)."""
    cases = []
    for case in ex.cases():
        if case.hidden:
            continue
        want, weights = running.reference_outcome(ex, case)
        expected = portable(want)
        if not comparing.same_value(expected.outputs, want.outputs):
            raise ShipError(f"{ex.name} [{case.label}]: the reference returns something that cannot be stored")
        blob = io.BytesIO()
        call = case.make()
        torch.save(travel.portable_call(call), blob)
        cases.append({
            "label": case.label, "part": case.part, "grad": case.grad, "call": blob.getvalue(), "raises": case.raises,
            "expected": expected, "weights": weights,
            "mistakes": {m.name: portable(catalogue.mistake_outcome(ex, m, case)) for m in ex.mistakes},
            "variants": {n: (says, portable(out)) for n, (says, out) in variants.variant_outcomes(ex, case).items()},
            "edits": edit_data(ex, case, want),
        })
        foreign = _not_shipped_modules(pickled_modules(blob.getvalue()))
        if foreign:
            raise ShipError(f"{ex.name} [{case.label}]: its inputs need {', '.join(sorted(foreign))} to load")
    return {
        "name": ex.name, "notebook": ex.notebook, "points": ex.points, "parts": ex.parts, "kind": ex.kind,
        "returns": tuple(ex.returns), "depends_on": tuple(ex.depends_on), "train_mode": ex.train_mode,
        "state_after": ex.state_after, "mistakes": [(m.name, m.says, catalogue.quoted(m)) for m in ex.mistakes],
        "cases": cases,
    }


def edit_data(ex, case, want):
    """{finder's key: {name: (sentence, outcome)}}: the reference's source edited by each finder of
    autograder.checks.relations.EDIT_FINDERS, run on `case`; only the edits whose outcome differs from the
    reference's `want` (the others can never be named), and only finders that found one."""
    found = {}
    for finder in relations.EDIT_FINDERS:
        kept = {n: (says, portable(out)) for n, (says, out) in edits.edit_outcomes(ex, case, finder).items()
                if not comparing.same_outputs(out, want)}
        if kept:
            found[edits.finder_key(finder)] = kept
    return found


def portable(outcome):
    """The outcome without autograd graphs, its error one that loads anywhere."""
    return Outcome(outputs=travel.plain(outcome.outputs), grads=travel.plain(outcome.grads), error=_portable_error(outcome.error))


def _portable_error(error):
    if error is None:
        return None
    buf = io.BytesIO()
    try:
        torch.save(error, buf)
        copy = torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
        if type(copy) is type(error) and str(copy) == str(error) and not _not_shipped_modules(pickled_modules(buf.getvalue())):
            return copy
    except Exception:
        pass
    return RuntimeError(str(error))


def pickled_modules(blob):
    """The modules whose names a torch.save'd blob refers to (it cannot load without them)."""
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        data = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    modules, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            modules.add(arg.split(" ")[0])
        elif op.name == "STACK_GLOBAL":
            modules.add(strings[-2])
        elif isinstance(arg, str):
            strings.append(arg)
    return modules


def _not_shipped_modules(modules):
    return {m for m in modules if m.split(".")[0] == REFERENCE or m.startswith("autograder.assignments")}


# ---------------------------------------------------------------- what must not ship


def reference_sources():
    """{what: source} of every exercise's reference and catalogued mistake."""
    found = {}
    for ex in registry.all_exercises():
        for what, obj in [("reference", ex.reference)] + [(f"mistake {m.name}", m.impl) for m in ex.mistakes]:
            for o in [obj] + closed_over(obj):
                found[f"{ex.name}: {what} ({o.__module__}.{o.__qualname__})"] = source_of(o)
    return found


def closed_over(obj):
    """What a factory function wraps (notebook 07's references are the solutions_lib classes, wrapped)."""
    if not inspect.isfunction(obj):
        return []
    return [v for v in inspect.getclosurevars(obj).nonlocals.values() if inspect.isclass(v) or inspect.isfunction(v)]


def code_lines(source):
    """The stripped lines of some code without docstrings, comments and blank lines (text that is no
    Python: its stripped lines)."""
    source = textwrap.dedent(source)
    lines, skip = source.splitlines(), set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    for node in ast.walk(tree) if tree else []:
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            skip |= set(range(body[0].lineno, body[0].end_lineno + 1))
    kept = [line.split("#")[0].strip() for i, line in enumerate(lines, 1) if i not in skip]
    return [line for line in kept if line]


def texts(folder):
    """{path: [text, ...]} of every file of `folder` a person can read: code, documents, notebooks' cells."""
    found = {}
    for path in sorted(Path(folder).rglob("*")):
        if not path.is_file() or path.suffix == ".pt" or "__pycache__" in path.parts:
            continue
        if path.suffix == ".ipynb":
            found[path] = [c.source for c in nbformat.read(path, as_version=4).cells]
        else:
            found[path] = [path.read_text(errors="replace")]
    return found


def leaks(folder):
    """[(path, what)] for each reference or mistake whose code stands in a file of `folder`."""
    files = {path: ["\n".join(code_lines(text)) for text in chunks] for path, chunks in texts(folder).items()}
    found = []
    for what, source in reference_sources().items():
        code = "\n".join(code_lines(source))
        found += [(path, what) for path, chunks in files.items() if any(code in chunk for chunk in chunks)]
    return found


# ---------------------------------------------------------------- writing it


def fingerprint(root, name):
    """Changes whenever anything a notebook's grading depends on does: its source, the course's code, torch."""
    root = Path(root)
    files = [root / "solutions" / name / f"{name}.ipynb", root / "nbgrader_config.py"]
    files += [p for package in ("autograder", "solutions_lib", "course_lib") for p in (root / package).rglob("*.py")]
    files += sorted((root / "course_lib" / "data").glob("*"))
    return digest(files)[:12] + "-" + torch.__version__.replace("+", "_")


def notebook_data(root, name):
    """The file of notebook `name`'s checks computed in advance, by the code of `root` (the code this process
    runs): computed once per version of that code (`fingerprint`) and kept in autograder.course.cache_dir."""
    path = cache_dir(root) / "data" / f"{name}-{fingerprint(root, name)}.pt"
    if path.is_file():
        return path
    with warnings.catch_warnings():  # some catalogued mistakes warn on purpose
        warnings.simplefilter("ignore")
        data = {"format": FORMAT, "exercises": [exercise_data(ex) for ex in registry.for_notebook(name)]}
    blob = io.BytesIO()
    torch.save(data, blob)
    keep(path, blob.getvalue(), f"{name}-*.pt")
    return path


def write_data(dest, name, root):
    """autograder/data/NAME.pt of the distribution in `dest`: the checks of notebook `name`, computed in advance
    (`notebook_data`). Returns what it holds."""
    path = Path(dest) / "autograder" / "data" / f"{name}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(notebook_data(root, name), path)
    return torch.load(path, weights_only=False)


def write_package(root, dest, without=()):
    """The distribution's code in `dest`: the check machinery, and course_lib as in the repository
    but for the definitions named in `without` (the grading sandbox's view of one notebook leaves
    out the building blocks that are that notebook's own exercises)."""
    package = dest / "autograder"
    package.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED:
        source = Path(root) / "autograder" / name
        if source.is_dir():
            shutil.copytree(source, package / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, package / name)
    if not (Path(root) / HELPERS / "__init__.py").is_file():
        raise ShipError(f"{Path(root) / HELPERS} is missing: the notebooks import it")
    (dest / HELPERS).mkdir()
    for path in sorted((Path(root) / HELPERS).glob("*.py")):
        (dest / HELPERS / path.name).write_text(without_definitions(path.read_text(), without))
    if (Path(root) / HELPERS / "data").is_dir():  # the texts notebooks read (notebook 10's Shakespeare)
        shutil.copytree(Path(root) / HELPERS / "data", dest / HELPERS / "data")


def without_definitions(source, names):
    """Python source without its top-level functions and classes named in `names`."""
    lines, drop = source.splitlines(keepends=True), set()
    for stmt in ast.parse(source).body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name in names:
            start = min([stmt.lineno] + [d.lineno for d in stmt.decorator_list])
            drop |= set(range(start - 1, stmt.end_lineno))
    return "".join(line for i, line in enumerate(lines) if i not in drop)
