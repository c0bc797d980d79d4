"""Where each exercise's checks live: one module per notebook in autograder.assignments."""
import importlib
import pkgutil

from autograder import assignments

_exercises = None


def _load():
    global _exercises
    if _exercises is None:
        found = {}
        for info in sorted(pkgutil.iter_modules(assignments.__path__), key=lambda m: m.name):
            module = importlib.import_module(f"autograder.assignments.{info.name}")
            for ex in module.EXERCISES:
                if ex.name in found:
                    raise ValueError(f"two exercises are named {ex.name!r} ({found[ex.name].notebook} and {module.NOTEBOOK}); names must be unique")
                ex.notebook = module.NOTEBOOK
                found[ex.name] = ex
        _exercises = found
    return _exercises


def get(name):
    exercises = _load()
    if name not in exercises:
        known = ", ".join(sorted(exercises))
        raise KeyError(f"no exercise named {name!r}; known exercises: {known}")
    return exercises[name]


def all_exercises():
    return list(_load().values())


def for_notebook(notebook):
    return [ex for ex in _load().values() if ex.notebook == notebook]


def demo_mistakes(notebook):
    """The mistakes put into the demo's 'two mistakes' submission of `notebook`."""
    module = importlib.import_module(f"autograder.assignments.{_module_name(notebook)}")
    return getattr(module, "DEMO_MISTAKES", [])


def _module_name(notebook):
    return "a" + notebook
