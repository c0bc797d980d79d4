"""Every exercise of the course and its checks, from one of two sources, chosen here:

- in the repository: the catalogs, one module per notebook in
  autograder.assignments with the reference and every case, and beside it a
  TOML file of the known mistakes (edits of the reference, autograder.mutants);
- in the student distribution, which ships no catalog and no reference: the
  public cases' answers computed by the release (autograder.reference_data).
"""
import functools
import importlib
import importlib.util
import pkgutil
import tomllib
from pathlib import Path

from autograder.checks.cases import Mistake
from autograder import reference_data

_exercises = None


def has_catalogs():
    """True in the repository, False in the student distribution (and the grading sandbox)."""
    try:
        return importlib.util.find_spec("autograder.assignments") is not None
    except ImportError:  # an import system that refuses it outright
        return False


def _from_catalogs():
    from autograder import assignments

    found = {}
    for info in sorted(pkgutil.iter_modules(assignments.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"autograder.assignments.{info.name}")
        mistakes = _mistakes_of(module)
        for ex in module.EXERCISES:
            if ex.name in found:
                raise ValueError(f"two exercises are named {ex.name!r} ({found[ex.name].notebook} and {module.NOTEBOOK}); names must be unique")
            ex.notebook = module.NOTEBOOK
            ex.cases = _kept(ex.cases)
            ex.mistakes = [_made(ex, module, name, entry) for name, entry in mistakes.pop(ex.name, {}).items()]
            found[ex.name] = ex
        if mistakes:
            raise ValueError(f"{module.__name__}: the mistakes of {', '.join(mistakes)} belong to no exercise of the notebook")
    return found


def _kept(cases):
    """An exercise's cases() made once: the same Case objects every time, so that what the checks work out on
    a case is kept on it (autograder.checks.running.memo); a fresh list each time, for a caller to change."""
    made = functools.cache(cases)
    return lambda: list(made())


def _mistakes_of(module):
    """{exercise: {mistake: entry}} from the TOML file beside a catalog module, in the file's order."""
    path = Path(module.__file__).with_suffix(".toml")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: {e}") from None


def _made(ex, module, name, entry):
    """A mistake of the TOML file: its edit applied to the reference, or the hand-written function it names."""
    from autograder import mutants

    where = f"{ex.name}.{name}"
    unknown = set(entry) - {"says", "swap", "every", "written"}
    if unknown or "says" not in entry or ("swap" in entry) == ("written" in entry):
        raise ValueError(f"{module.__name__} mistake {where}: give says and either swap or written (found {', '.join(sorted(entry))})")
    if "written" in entry:
        return Mistake(name, entry["says"], getattr(module, entry["written"]))
    swaps = entry["swap"] if isinstance(entry["swap"][0], list) else [entry["swap"]]
    edit = mutants.Edit(tuple((old, new, entry.get("every", False)) for old, new in swaps))
    # a reference factory (say, one that randomises a module's weights) edits what it wraps
    reference = getattr(ex.reference, "__wrapped__", ex.reference)
    return Mistake(name, entry["says"], mutants.mutant(reference, edit, where), edit=edit)


def _load():
    global _exercises
    if _exercises is None:
        _exercises = _from_catalogs() if has_catalogs() else reference_data.load_all()
    return _exercises


def get(name):
    exercises = _load()
    if name not in exercises:
        raise KeyError(f"no exercise named {name!r}; known exercises: {', '.join(sorted(exercises))}")
    return exercises[name]


def all_exercises():
    return list(_load().values())


def for_notebook(notebook):
    return [ex for ex in _load().values() if ex.notebook == notebook]


def demo_mistakes(notebook):
    """The mistakes put into the demo's 'two mistakes' submission of `notebook`."""
    module = importlib.import_module(f"autograder.assignments.a{notebook}")
    return getattr(module, "DEMO_MISTAKES", [])
