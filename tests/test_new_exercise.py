"""`python -m autograder new-exercise`, on a copy of the course (never this tree): the cells, catalog entry and TOML
table it writes, what `--check` lists, and an exercise added with it released and graded through real nbgrader."""
import ast
import shutil
import textwrap

import nbformat
import pytest

from autograder import registry
from autograder.grading.grade import read_grades
from autograder.mutants import source_of
from autograder.new_exercise import with_markers
from autograder.release import HEADING, TABLE, fill_submission, lay_out, solution_code
from conftest import ROOT, clone, exercises, in_clone, results_of

NOTEBOOK, NAME, AFTER = "05_self_attention", "throwaway_scale", "causal_mask"
REFERENCE = '''
def throwaway_scale(scores, factor):
    """The scores multiplied by a factor.

    scores: (B, T_q, T_k), factor: a float
    returns: (B, T_q, T_k)
    """
    return scores * factor
'''
CASES = '''
def throwaway_scale_cases():
    def case(seed, B, T, factor, hidden=False):
        return Case(dims(B=B, T_q=T, T_k=T) + f", factor={factor}", lambda: Call((Draw(seed).randn(B, T, T), factor)), hidden=hidden)

    return [case(1, 2, 3, 0.5), case(2, 1, 4, 2.0), case(3, 3, 2, -1.5, hidden=True)]
'''
UNSCALED = "you returned the scores without multiplying them by factor."
MISTAKES = f'''unscaled = {{ says = "{UNSCALED}", swap = [" * factor", ""] }}
'''
# the public cases' factors are positive: only the hidden case tells this one apart
HIDDEN_ONLY = '''abs_factor = { says = "you multiplied by the factor's size, not by the factor.", swap = [" * factor", " * abs(factor)"] }
'''


def notebook(root, name=NOTEBOOK):
    return nbformat.read(root / "solutions" / name / f"{name}.ipynb", as_version=4)


@pytest.fixture(scope="module")
def added(tmp_path_factory):
    """A copy of the course with the reference of throwaway_scale written in solutions_lib, then added by the command."""
    root = clone(tmp_path_factory.mktemp("course_copy"))
    with open(root / "solutions_lib" / "attention.py", "a") as f:
        f.write("\n" + REFERENCE)
    done = in_clone(root, "new-exercise", NOTEBOOK, NAME, "--after", AFTER, "--points", "2", "--difficulty", "2", "--minutes", "5")
    assert done.returncode == 0, done.stderr
    return root


def test_the_cells_go_after_the_earlier_exercise_and_the_later_ones_are_renumbered(added):
    nb = notebook(added)
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == f"check_{AFTER}")
    heading, hints, solution, check = nb.cells[at + 1:at + 5]
    assert heading.source.startswith(f"### Exercise 5 · `{NAME}` (difficulty ● ● ○, about 5 minutes)")
    assert "<details><summary>Hint 1 · the idea</summary>" in hints.source and "Hint 2 · the approach" in hints.source
    assert solution.metadata["nbgrader"] == {"grade": False, "grade_id": NAME, "locked": False, "schema_version": 3, "solution": True, "task": False}
    assert solution_code(solution.source).strip() == REFERENCE.strip() and "    ### BEGIN SOLUTION\n    return scores * factor" in solution.source
    assert check.source == f'check("{NAME}", {NAME})'
    assert check.metadata["nbgrader"] == {"grade": True, "grade_id": f"check_{NAME}", "locked": True, "points": 2,
                                          "schema_version": 3, "solution": False, "task": False}
    assert len({c.id for c in nb.cells}) == len(nb.cells)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert [(m[1], m[2]) for m in HEADING.finditer(text)] == [
        ("1", "qkv_projections"), ("2", "attention_scores"), ("3", "scaled_dot_product_attention"), ("4", "causal_mask"),
        ("5", NAME), ("6", "padding_mask"), ("7", "SelfAttention")]
    assert "| 5 | `throwaway_scale` | ● ● ○ | 5 min |\n| 6 | `padding_mask` | ● ● ○ | 10 min |" in TABLE.search(text)[0]
    assert not lay_out(nb, [ex.name for ex in registry.for_notebook(NOTEBOOK)] + [NAME])


def test_the_catalog_gets_the_exercise_after_the_earlier_one_and_a_table_for_its_mistakes(added):
    catalog = (added / "autograder" / "assignments" / f"a{NOTEBOOK}.py").read_text()
    listing = catalog[catalog.index("EXERCISES = ["):]
    assert listing.index(f'Exercise("{AFTER}"') < listing.index(f'Exercise("{NAME}", throwaway_scale, points=2, cases={NAME}_cases)') \
        < listing.index('Exercise("padding_mask"')
    assert f"def {NAME}_cases():" in catalog and "from solutions_lib.attention import throwaway_scale" in catalog
    assert (added / "autograder" / "assignments" / f"a{NOTEBOOK}.toml").read_text().endswith(f"\n\n[{NAME}]\n")


def test_check_lists_what_the_skeleton_leaves_to_write(added):
    done = in_clone(added, "new-exercise", NOTEBOOK, NAME, "--check")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, lines
    assert "the reference failed on case 'TODO'" in lines[0] and f"write its cases in a{NOTEBOOK}.py" in lines[0]
    assert lines[1:] == [f"- no catalogued mistake in a{NOTEBOOK}.toml [{NAME}]", "- its text or hints still say TODO"]


def test_the_command_refuses_what_it_cannot_place(added):
    for args, says in [((NAME, "--after", AFTER), "already an exercise named 'throwaway_scale'"),
                       (("nowhere", "--after", AFTER), "no function or class 'nowhere' in solutions_lib"),
                       ((NAME + "2", "--after", "nope"), "05_self_attention has no exercise 'nope'"),
                       ((NAME + "2",), "--after EXERCISE")]:
        done = in_clone(added, "new-exercise", NOTEBOOK, *args)
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)


@pytest.mark.parametrize("name", ["shift_right", "make_masks", "SelfAttention", "GeneralScore", "LayerNorm"])
def test_the_markers_go_where_the_course_puts_them(name):
    ex = registry.get(name)
    cell = next(c for c in notebook(ROOT, ex.notebook).cells if c.metadata.get("nbgrader", {}).get("grade_id") == name)
    assert with_markers(source_of(getattr(ex.reference, "__wrapped__", ex.reference))) == cell.source


@pytest.mark.slow
def test_an_added_exercise_is_released_and_graded_by_nbgrader(added, tmp_path):
    root = shutil.copytree(added, tmp_path / "course_code")
    # what the maintainer writes: the cases, the mistakes, the text and the hints
    path = root / "autograder" / "assignments" / f"a{NOTEBOOK}.py"
    lines = path.read_text().splitlines()
    skeleton = next(n for n in ast.parse(path.read_text()).body if getattr(n, "name", None) == f"{NAME}_cases")
    lines[skeleton.lineno - 1:skeleton.end_lineno] = CASES.strip().splitlines()
    path.write_text("\n".join(lines) + "\n")
    toml = path.with_suffix(".toml")
    toml.write_text(toml.read_text() + MISTAKES + HIDDEN_ONLY)
    nb = notebook(root)
    for cell in nb.cells:
        cell.source = cell.source.replace("TODO: what to write, and what the check compares.", "Multiply the scores by `factor`.") \
            .replace("TODO: the idea, in a sentence or two.", "Every score is multiplied by the same number.") \
            .replace("TODO: the approach, with the key PyTorch call in code font (`torch...`).", "`scores * factor` broadcasts it.")
    nbformat.write(nb, root / "solutions" / NOTEBOOK / f"{NOTEBOOK}.ipynb")

    done = in_clone(root, "new-exercise", NOTEBOOK, NAME, "--check")
    assert (done.returncode, done.stdout) == (1, "- the mistake abs_factor is not caught on a public case: add a public case "
                                                 "on which it differs from the reference\n"), done.stderr
    toml.write_text(toml.read_text().replace(HIDDEN_ONLY, ""))
    done = in_clone(root, "new-exercise", NOTEBOOK, NAME, "--check")
    assert (done.returncode, done.stdout) == (0, f"{NAME}: nothing missing\n"), done.stderr

    done = in_clone(root, "release", NOTEBOOK)
    assert done.returncode == 0, done.stderr
    course = tmp_path / "course"
    for student in ("ada_complete", "ben_blank"):  # the release's demo submissions: complete, and blank
        shutil.copytree(root / "examples" / "submitted" / student / NOTEBOOK, course / "submitted" / student / NOTEBOOK)
    released = nbformat.read(root / "notebooks" / NOTEBOOK / f"{NOTEBOOK}.ipynb", as_version=4)
    mistake = textwrap.dedent(REFERENCE).strip().replace(" * factor", "")
    out = course / "submitted" / "dee_unscaled" / NOTEBOOK / f"{NOTEBOOK}.ipynb"
    out.parent.mkdir(parents=True)
    nbformat.write(fill_submission(released, notebook(root), {NAME: mistake}), out)
    done = in_clone(root, "grade", course, "--jobs", "2", "--no-progress")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    full = sum(ex.points for ex in registry.for_notebook(NOTEBOOK)) + 2
    assert {g["student_id"]: float(g["score"]) for g in read_grades(course)} == {"ada_complete": full, "ben_blank": 0, "dee_unscaled": full - 2}
    assert results_of(course, "ada_complete", NOTEBOOK)[NAME].status == "passed"
    wrong = results_of(course, "dee_unscaled", NOTEBOOK)[NAME]
    assert wrong.score == 0 and f"Likely mistake: {UNSCALED}" in wrong.reason


@pytest.mark.parametrize("ex", exercises(), ids=lambda ex: ex.name)
def test_no_exercise_lacks_anything_its_check_needs(ex):
    # what `new-exercise --check` asks of a new exercise holds for every one: a hidden case in every part, each
    # catalogued mistake caught and named as itself on a public case (which a learner sees), hints, no TODO
    from autograder.new_exercise import missing

    assert missing(ROOT, ex.notebook, ex.name) == []
