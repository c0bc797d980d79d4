"""Every exercise of the course and its checks, from one of two sources, chosen here:

- in the repository: the catalogs, one module per notebook in
  autograder.assignments, with the reference, every case and the known
  mistakes (edits of the reference, autograder.mutants);
- in the student distribution, which ships no catalog and no reference: the
  public cases' answers computed by the release (autograder.reference_data).
"""
import importlib
import importlib.util
import pkgutil

from autograder import core, reference_data

_exercises = None


def has_catalogs():
    """True in the repository, False in the student distribution (and the grading sandbox)."""
    try:
        return importlib.util.find_spec("autograder.assignments") is not None
    except ImportError:  # an import system that refuses it outright
        return False


def _from_catalogs():
    from autograder import assignments, mutants

    found = {}
    for info in sorted(pkgutil.iter_modules(assignments.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"autograder.assignments.{info.name}")
        for ex in module.EXERCISES:
            if ex.name in found:
                raise ValueError(f"two exercises are named {ex.name!r} ({found[ex.name].notebook} and {module.NOTEBOOK}); names must be unique")
            ex.notebook = module.NOTEBOOK
            ex.mistakes = [_made(ex, m) for m in ex.mistakes]
            found[ex.name] = ex
    return found


def _made(ex, mistake):
    """A catalog's mistake with its edit of the reference applied (hand-written ones stay as they are)."""
    from autograder import mutants

    if isinstance(mistake.impl, mutants.Edit):
        # a reference factory (say, one that randomises a module's weights) edits what it wraps
        reference = getattr(ex.reference, "__wrapped__", ex.reference)
        made = mutants.mutant(reference, mistake.impl, f"{ex.name}.{mistake.name}")
        return core.Mistake(mistake.name, mistake.says, made, edit=mistake.impl)
    return mistake


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
