"""What a stuck learner gets: `reveal`, and `python -m autograder progress` over saved notebooks."""
import shutil

import nbformat
import pytest
from nbformat.v4 import new_output

from autograder import registry, reveal
from autograder.__main__ import main
from autograder.api import RESULT_MIME, explain, result_data
from autograder.checks.driver import check_exercise
from autograder.progress import progress
from autograder.reveal import NOT_SHIPPED, text

from conftest import ROOT

NAME = "05_self_attention"


# ---------------------------------------------------------------- reveal


def test_reveal_shows_the_reference_and_explains_its_key_lines(capsys):
    assert reveal("attention_scores") is None
    out = capsys.readouterr().out
    ex = registry.get("attention_scores")
    assert "Revealed: the reference solution of attention_scores" in out
    assert "return q @ k.transpose(-2, -1) / math.sqrt(d_k)" in out
    key = out.split("Key lines")[1]
    # every catalogued mistake of the exercise explains the line it changes
    assert all(m.says in key for m in ex.mistakes)


def test_reveal_of_a_module_shows_the_class():
    out = text(registry.get("EncoderLayer"))
    assert "class EncoderLayer(nn.Module):" in out and "x = self.norm1(x + self.dropout(attended))" in out


def test_reveal_does_nothing_under_grading(monkeypatch, capsys):
    monkeypatch.setenv("AUTOGRADER_CASES", "/nowhere/cases.pt")
    assert reveal("attention_scores") is None
    assert capsys.readouterr().out == ""


def test_reveal_says_so_where_the_solutions_are_not_shipped(monkeypatch, capsys):
    monkeypatch.setattr(registry, "has_catalogs", lambda: False)
    reveal("attention_scores")
    assert capsys.readouterr().out.strip() == NOT_SHIPPED


def test_reveal_of_an_unknown_exercise_names_the_known_ones():
    with pytest.raises(KeyError, match="known exercises: .*attention_scores"):
        reveal("attention_score")


# ---------------------------------------------------------------- progress


def saved(path, name, results):
    """The released notebook `name`, saved at `path` as if its check cells had run with these results."""
    nb = nbformat.read(ROOT / "notebooks" / name / f"{name}.ipynb", as_version=4)
    for cell in nb.cells:
        ex = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "").removeprefix("check_")
        if cell.cell_type == "code" and ex in results:
            report = check_exercise(registry.get(ex), results[ex])
            data = result_data(report, explain(report, {})[1])
            cell.outputs = [new_output("display_data", data={RESULT_MIME: data, "text/plain": ""})]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def test_progress_reads_each_saved_notebook_without_running_it(tmp_path, capsys):
    masks = registry.get("causal_mask")
    inverted = next(m for m in masks.mistakes if m.name == "inverted").impl
    saved(tmp_path / NAME / f"{NAME}.ipynb", NAME,
          {"qkv_projections": registry.get("qkv_projections").reference, "attention_scores": registry.get("attention_scores").reference,
           "causal_mask": inverted})
    other = "06_multi_head_attention"
    shutil.copy(ROOT / "notebooks" / other / f"{other}.ipynb", tmp_path / f"{other}.ipynb")
    # a checkpoint copy is not the learner's notebook
    saved(tmp_path / NAME / ".ipynb_checkpoints" / f"{NAME}.ipynb", NAME, {"qkv_projections": registry.get("qkv_projections").reference})
    assert main(["progress", str(tmp_path)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    n = len(registry.for_notebook(NAME))
    points = sum(ex.points for ex in registry.for_notebook(NAME))
    earned = registry.get("qkv_projections").points + registry.get("attention_scores").points
    assert rows[NAME].split()[1:7] == ["2", "/", str(n), f"{earned:g}", "/", f"{points:g}"]
    assert rows[NAME].endswith("scaled_dot_product_attention: not run yet")
    assert rows[other].split()[1:4] == ["0", "/", str(len(registry.for_notebook(other)))]
    assert rows["total"].split()[1:] == [f"{earned:g}", "/", f"{points + sum(ex.points for ex in registry.for_notebook(other)):g}"]
    assert len([r for r in rows if r[:2].isdigit()]) == 2


def test_progress_names_the_first_exercise_that_failed(tmp_path):
    inverted = next(m for m in registry.get("causal_mask").mistakes if m.name == "inverted").impl
    done = {ex.name: ex.reference for ex in registry.for_notebook(NAME)}
    saved(tmp_path / f"{NAME}.ipynb", NAME, done | {"causal_mask": inverted})
    row = progress(tmp_path).splitlines()[1]
    assert row.endswith(f"causal_mask: failed, 0/{registry.get('causal_mask').points:g}")
    saved(tmp_path / f"{NAME}.ipynb", NAME, done)
    assert progress(tmp_path).splitlines()[1].endswith("done")


def test_progress_of_a_folder_without_notebooks_says_so(tmp_path):
    assert "no course notebooks" in progress(tmp_path)
    (tmp_path / "05_broken.ipynb").write_text("{not json")
    assert "cannot be read" in progress(tmp_path)


@pytest.mark.parametrize("path", sorted(ROOT.glob("solutions/*/*.ipynb")), ids=lambda p: p.stem)
def test_a_notebook_promises_a_pytorch_call_only_if_it_uses_pytorch(path):
    # notebook 09 (BPE) has no PyTorch: its introduction promises "the key Python call" instead
    nb = nbformat.read(path, as_version=4)
    text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = " ".join(c.source for c in nb.cells if c.cell_type == "code")
    if "key PyTorch call" in text:
        assert "torch" in code, f"{path.name} promises a PyTorch call and uses no PyTorch"
