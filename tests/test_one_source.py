"""Each exercise is written once: its solution cell holds exactly solutions_lib's code,
and its points come from the catalog (the release writes them into the nbgrader metadata)."""
import ast

import nbformat
import pytest

from autograder import registry
from autograder.mutants import source_of
from autograder.release import solution_code
from autograder.course import find_root
from conftest import exercises

EXERCISES = exercises()  # COURSE_ASSIGNMENTS narrows them (tests/conftest.py)


def _cells(ex):
    nb = nbformat.read(find_root() / "solutions" / ex.notebook / f"{ex.notebook}.ipynb", as_version=4)
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: f"{ex.notebook[:2]}-{ex.name}")
def test_the_solution_cell_is_the_reference(ex):
    reference = getattr(ex.reference, "__wrapped__", ex.reference)
    cell = _cells(ex).get(ex.name)
    assert cell is not None, f"solutions/{ex.notebook} has no solution cell with grade_id {ex.name!r}"
    code = solution_code(cell.source)
    found = [ast.get_source_segment(code, n) for n in ast.parse(code).body if getattr(n, "name", None) == reference.__name__]
    assert found, f"the solution cell {ex.name!r} does not define {reference.__name__}"
    assert found[0].rstrip() == source_of(reference).rstrip(), (
        f"the solution cell of {ex.name} and {reference.__module__}.{reference.__qualname__} differ; "
        "they must be the same code, docstring included"
    )


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: f"{ex.notebook[:2]}-{ex.name}")
def test_the_points_are_the_catalogs(ex):
    cell = _cells(ex).get(f"check_{ex.name}")
    assert cell is not None, f"solutions/{ex.notebook} has no check cell check_{ex.name}"
    assert cell.metadata["nbgrader"]["points"] == ex.points, "run `python -m autograder release` to write the catalog's points"


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: f"{ex.notebook[:2]}-{ex.name}")
def test_an_exercise_declares_every_exercise_its_reference_calls(ex):
    # A mistake is an edit of the reference, so it calls what the reference calls; the grader charges an
    # earlier exercise's mistake once only through depends_on (autograder.grading.verdict).
    reference = getattr(ex.reference, "__wrapped__", ex.reference)
    names = {n.id for n in ast.walk(ast.parse(source_of(reference))) if isinstance(n, ast.Name)}
    calls = names & ({e.name for e in registry.for_notebook(ex.notebook)} - {ex.name})
    assert calls <= set(ex.depends_on), f"{ex.name} uses {sorted(calls - set(ex.depends_on))}: add them to depends_on"


# ---------------------------------------------------------------- the mistakes' TOML files


def _catalog_module(ex):
    import importlib

    return importlib.import_module(f"autograder.assignments.a{ex.notebook}")


@pytest.mark.parametrize("entry, says", [
    ({"says": "a sentence."}, "give says and either swap or written"),
    ({"says": "a sentence.", "swap": ["x", "y"], "written": "f"}, "give says and either swap or written"),
    ({"swap": ["math.sqrt", "abs"]}, "give says and either swap or written"),
    ({"says": "a sentence.", "swap": ["math.sqrt", "abs"], "evry": True}, "(found evry, says, swap)"),
    ({"says": "a sentence.", "swap": ["no such text", "x"]}, "'no such text' not found in the reference"),
])
def test_a_malformed_mistake_is_named_at_import(entry, says):
    ex = registry.get("attention_scores")
    with pytest.raises(ValueError) as raised:
        registry._made(ex, _catalog_module(ex), "broken", entry)
    assert says in str(raised.value) and "attention_scores.broken" in str(raised.value)


def test_a_mistake_of_no_exercise_is_named(monkeypatch):
    module = _catalog_module(registry.get("attention_scores"))
    read = registry._mistakes_of
    typo = {"attention_score": {"unscaled": {"says": "s.", "swap": [" / math.sqrt(d_k)", ""]}}}
    monkeypatch.setattr(registry, "_mistakes_of", lambda m: {**read(m), **typo} if m is module else read(m))
    with pytest.raises(ValueError, match="the mistakes of attention_score belong to no exercise of the notebook"):
        registry._from_catalogs()


# ---------------------------------------------------------------- one home for what both sides share


def _imported(path):
    tree = ast.parse(path.read_text())
    found = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    return found | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


@pytest.mark.parametrize("side, other", [("grading", "release"), ("release", "grading")])
def test_releasing_and_grading_do_not_import_each_other(side, other):
    # what a class is shipped (autograder.ship) and nbgrader's API (autograder.nbgrader_api) are theirs to share
    for path in sorted((find_root() / "autograder" / side).glob("*.py")):
        crossing = sorted(m for m in _imported(path) if m.startswith(f"autograder.{other}"))
        assert not crossing, f"{path.name} imports {crossing}"
