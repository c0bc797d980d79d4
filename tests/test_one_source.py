"""Each exercise is written once: its solution cell holds exactly solutions_lib's code,
and its points come from the catalog (the release writes them into the nbgrader metadata)."""
import ast

import nbformat
import pytest

from autograder import registry
from autograder.mutants import source_of
from autograder.release import solution_code
from autograder.course import find_root

EXERCISES = registry.all_exercises()


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
    # earlier exercise's mistake once only through depends_on (autograder.verdict).
    reference = getattr(ex.reference, "__wrapped__", ex.reference)
    names = {n.id for n in ast.walk(ast.parse(source_of(reference))) if isinstance(n, ast.Name)}
    calls = names & ({e.name for e in registry.for_notebook(ex.notebook)} - {ex.name})
    assert calls <= set(ex.depends_on), f"{ex.name} uses {sorted(calls - set(ex.depends_on))}: add them to depends_on"
