"""The committed notebooks: clean, openable, and consistent with the checks."""
import nbformat
import pytest

from autograder import registry
from autograder.new_exercise import TODO
from autograder.release import HEADING, HINT, lay_out
from conftest import ASSIGNMENTS, ROOT

NOTEBOOKS = [ROOT / d / n / f"{n}.ipynb" for d in ("solutions", "notebooks") for n in ASSIGNMENTS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_committed_without_outputs_and_with_a_kernelspec(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "clear the outputs before committing"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_each_exercise_has_a_solution_cell_and_one_line_check(name):
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    meta = [(c, c.metadata.get("nbgrader", {})) for c in nb.cells]
    tests = {m["grade_id"]: (c, m) for c, m in meta if m.get("grade") and not m.get("solution")}
    solutions = {m["grade_id"] for c, m in meta if m.get("solution")}
    exercises = registry.for_notebook(name)
    assert exercises, f"no checks registered for {name}"
    for ex in exercises:
        cell, m = tests[f"check_{ex.name}"]
        assert cell.source.strip() == f'check("{ex.name}", {ex.name})'
        assert m["locked"] and m["points"] == ex.points, f"{ex.name}: points differ from the autograder's"
        assert ex.name in solutions
    assert len(tests) == len(exercises)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_each_exercise_states_difficulty_and_time(name):
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for ex in registry.for_notebook(name):
        assert any(m[2] == ex.name for m in HEADING.finditer(text)), ex.name


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solution_cells_never_call_solutions_lib(name):
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            assert "solutions_lib" not in cell.source and "sl." not in cell.source


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_each_exercise_has_hints_in_tiers_just_above_its_solution_cell(name):
    # Collapsed (<details>): the idea first, then the approach with the key PyTorch call.
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    for ex in registry.for_notebook(name):
        at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == ex.name)
        above = nb.cells[at - 1]
        tiers = HINT.findall(above.source) if above.cell_type == "markdown" else []
        assert [int(n) for n, _ in tiers][:2] == [1, 2], f"{ex.name}: no tiered hints just above its solution cell"
        assert [int(n) for n, _ in tiers] == list(range(1, len(tiers) + 1)) and all(text.strip() for _, text in tiers)
        assert "`" in tiers[1][1], f"{ex.name}: the second hint names the key call, in code font"
        assert TODO not in above.source, f"{ex.name}: its hints still hold the skeleton of `new-exercise`"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_headings_numbers_and_the_table_of_exercises_follow_the_registry(name):
    # the release writes them (autograder.release.lay_out): numbers in the order of the solution cells
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    assert not lay_out(nb, [ex.name for ex in registry.for_notebook(name)]), "run `python -m autograder release`"
    assert TODO not in "\n".join(c.source for c in nb.cells), "the skeleton of `new-exercise` is still there"


def test_the_release_renumbers_the_headings_and_rewrites_the_table():
    name = "08_training_a_transformer"
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    sources = [c.source for c in nb.cells]
    for cell in nb.cells:
        cell.source = cell.source.replace("### Exercise 2 · `make_masks`", "### Exercise 9 · `make_masks`") \
            .replace("| 4 | `warmup_lr` | ● ○ ○ | 5 min |\n", "")
    assert [c.source for c in nb.cells] != sources
    assert lay_out(nb, [ex.name for ex in registry.for_notebook(name)]) and [c.source for c in nb.cells] == sources
