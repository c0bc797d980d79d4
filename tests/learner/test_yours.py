"""The later notebooks use the learner's own classes once their checks pass (autograder.yours),
and show every attention map of whichever model is in use (course_lib.transformer.attention_maps)."""
import json
import shutil

import pytest
import torch

import course_lib.transformer as standins
import solutions_lib.transformer as reference
from autograder.api import RESULT_MIME
from autograder.progress import check_cells
from conftest import ROOT
from course_lib.multihead import MultiHeadAttention as StandinMHA
from autograder.yours import yours

EARLIER = ["04_positional_encoding", "05_self_attention", "06_multi_head_attention", "07_transformer_architecture"]


def _learner(folder, status=None, broken=None, notebooks=EARLIER):
    """A learner's course folder: the solution notebooks of 04-07 (or `notebooks`), saved after every check ran.

    status: {exercise: status} overrides "passed"; broken: {exercise: source} replaces a solution cell.
    """
    status, broken = status or {}, broken or {}
    for name in notebooks:
        nb = json.loads((ROOT / "solutions" / name / f"{name}.ipynb").read_text())
        for cell in nb["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            exercise = meta.get("grade_id", "").removeprefix("check_")
            if meta.get("solution") and exercise in broken:
                cell["source"] = broken[exercise]
            if cell["cell_type"] == "code" and meta.get("grade") and not meta.get("solution"):
                result = {"exercise": exercise, "status": status.get(exercise, "passed"), "score": 1, "points": 1}
                cell["outputs"] = [{"output_type": "display_data", "metadata": {}, "data": {RESULT_MIME: result, "text/plain": ""}}]
        (folder / name).mkdir(parents=True)
        (folder / name / f"{name}.ipynb").write_text(json.dumps(nb))
        assert all(r and r["status"] == status.get(e, "passed") for e, _, r in check_cells(nb))
    if notebooks is EARLIER:
        (folder / "08_training_a_transformer").mkdir()
        return folder / "08_training_a_transformer"
    return folder


def _sizes():
    return dict(d_model=16, h=4, d_ff=32, N=2, dropout=0.0)


def test_your_transformer_trains_on_your_attention_when_the_checks_passed(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("AUTOGRADER_QUICK", raising=False)
    Transformer = yours(standins.Transformer, folder=_learner(tmp_path))
    said = capsys.readouterr().out
    assert Transformer is not standins.Transformer and Transformer.__module__ == "yours_07_transformer_architecture"
    assert "yours: Transformer (07), with your MultiHeadAttention, causal_mask, count_parameters, padding_mask, sinusoidal_positional_encoding\n" == said, said
    torch.manual_seed(0)
    mine, ref = Transformer(11, 13, **_sizes()).eval(), reference.Transformer(11, 13, **_sizes()).eval()
    assert type(mine.encoder.layers[0].self_attn).__module__ == "yours_06_multi_head_attention"
    mine.load_state_dict(ref.state_dict())
    src, tgt = torch.randint(3, 11, (2, 7)), torch.randint(3, 13, (2, 5))
    torch.testing.assert_close(mine(src, tgt, (src != 0).unsqueeze(1)), ref(src, tgt, (src != 0).unsqueeze(1)))


def test_the_state_of_the_random_numbers_is_left_as_it_was(tmp_path, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    yours(standins.Transformer, folder=_learner(tmp_path))  # runs setup cells that seed
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("status, broken, reason", [
    ({"Decoder": "failed"}, None, "07: the check of Decoder has not passed, failed"),
    ({"Transformer": None}, None, "07: the check of Transformer has not passed, not run yet in the saved "
                                  "07_transformer_architecture.ipynb: run its check cells in Jupyter and save it, or run `python -m "
                                  "autograder check --save 07_transformer_architecture.ipynb` (without --save it grades the "
                                  "notebook but does not write the results into it)"),
    (None, {"Encoder": "class Encoder(nn.Module):\n    def __init__(self, d_model):\n        super().__init__(\n"},
     "running 07_transformer_architecture.ipynb failed: SyntaxError"),
])
def test_the_course_model_is_used_until_yours_passes_and_says_why(tmp_path, capsys, monkeypatch, status, broken, reason):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    folder = _learner(tmp_path, status=status, broken=broken)
    if status and None in status.values():  # a check never run: its cell has no saved result
        path = tmp_path / EARLIER[-1] / f"{EARLIER[-1]}.ipynb"
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "check_Transformer":
                cell["outputs"] = []
        path.write_text(json.dumps(nb))
    assert yours(standins.Transformer, folder=folder) is standins.Transformer
    said = capsys.readouterr().out
    assert said.startswith("the course's: Transformer (") and reason in said, said


def test_each_block_is_yours_or_the_course_s_on_its_own(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    folder = _learner(tmp_path, status={"split_heads": "failed"})
    shutil.rmtree(tmp_path / "04_positional_encoding")
    mha, mask = yours(StandinMHA, standins.causal_mask, folder=folder)
    said = capsys.readouterr().out
    assert mha is StandinMHA and mask.__module__ == "yours_05_self_attention"
    assert said == ("yours: causal_mask (05); the course's: MultiHeadAttention "
                    "(06: the check of split_heads has not passed, failed)\n"), said
    Transformer = yours(standins.Transformer, folder=folder)  # 07's Transformer, on the course's attention
    assert type(Transformer(5, 5, **_sizes()).encoder.layers[0].self_attn) is StandinMHA
    assert "positional_encoding" not in capsys.readouterr().out


def test_a_grader_always_gets_the_course_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert yours(standins.Transformer, folder=_learner(tmp_path)) is standins.Transformer
    assert capsys.readouterr().out == "Transformer: the course's (a grader is running this notebook)\n"


def test_without_the_earlier_notebooks_the_course_model_is_used(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert yours(standins.Transformer, folder=tmp_path) is standins.Transformer
    assert "no 07_transformer_architecture.ipynb next to this notebook" in capsys.readouterr().out


def test_the_attention_grid_reads_the_same_maps_from_the_stand_in_and_the_lesson_s_model():
    torch.manual_seed(0)
    theirs = standins.Transformer(11, 13, **_sizes()).eval()
    ours = reference.Transformer(11, 13, **_sizes()).eval()
    state = {f"{e}.weight": getattr(theirs, e).weight for e in ("src_embed", "tgt_embed", "out")} | {"out.bias": theirs.out.bias}
    for stack, convert in (("encoder", standins.encoder_layer_state_from_pytorch), ("decoder", standins.decoder_layer_state_from_pytorch)):
        for i, layer in enumerate(getattr(theirs, stack).layers):
            state |= {f"{stack}.layers.{i}.{k}": v for k, v in convert(layer).items()}
    ours.load_state_dict(state)
    src, ys = torch.randint(3, 11, (2, 7)), torch.randint(3, 13, (2, 5))
    src[1, 5:] = 0
    a, b = standins.attention_maps(theirs, src, ys), standins.attention_maps(ours, src, ys)
    assert list(a) == ["encoder self-attention", "decoder self-attention", "cross-attention"]
    for kind in a:
        assert len(a[kind]) == len(b[kind]) == 2
        for x, y in zip(a[kind], b[kind]):
            assert x.shape == y.shape and x.size(1) == 4
            torch.testing.assert_close(x, y)
    assert not theirs.training and (a["cross-attention"][0][1, :, :, 5:] == 0).all()  # padding gets no weight
    torch.testing.assert_close(standins.cross_attention(ours, src, ys, layer=0), b["cross-attention"][0])


@pytest.mark.slow
def test_a_learner_who_completed_05_to_07_trains_their_own_transformer_to_99_percent(tmp_path, monkeypatch):
    # the command's recipe, solutions_lib.train's defaults (warm-up 100, evaluation every 50 steps, a moving average of
    # the weights; notebook 08 trains with warm-up 300, every 100 steps, no average), on the classes of the learner's
    # notebooks 04-07, here the solution notebooks' own cells
    from solutions_lib.train import Config, fit

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    Transformer = yours(standins.Transformer, folder=_learner(tmp_path))
    assert Transformer.__module__ == "yours_07_transformer_architecture"
    result = fit(Config(), progress=False, log=lambda *a: None, model_class=Transformer)
    assert type(result["model"].encoder.layers[0].self_attn).__module__ == "yours_06_multi_head_attention"
    assert result["reached"] and max(result["history"]["exact_match"]) >= 0.99, result["history"]


@pytest.mark.slow
def test_check_save_writes_the_results_that_yours_then_counts(tmp_path, capsys, monkeypatch):
    # the learner graded 06 with the command, not in Jupyter: with --save its check cells keep the results
    from autograder.check_notebook import check, save_results

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    name = "06_multi_head_attention"
    folder = _learner(tmp_path, notebooks=[name])
    path = folder / name / f"{name}.ipynb"
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade") and not cell["metadata"]["nbgrader"].get("solution"):
            cell["outputs"] = []
    path.write_text(json.dumps(nb))
    (folder / "07_transformer_architecture").mkdir()
    here = folder / "07_transformer_architecture"
    assert yours(StandinMHA, folder=here) is StandinMHA and "not run yet" in capsys.readouterr().out

    assert check([str(path)], echo=lambda *a: None) == 0  # grades, writes nothing
    assert yours(StandinMHA, folder=here) is StandinMHA and "not run yet" in capsys.readouterr().out
    said = []
    assert check([str(path)], save=True, echo=said.append) == 0
    assert f"saved these results into the check cells of {path}" in said[-1]
    assert all(r and r["status"] == "passed" for _, _, r in check_cells(json.loads(path.read_text())))
    assert yours(StandinMHA, folder=here) is not StandinMHA
    assert capsys.readouterr().out.startswith("yours: MultiHeadAttention (06)")
    # a notebook saved again while it ran is left as it is
    before = path.read_bytes()
    path.write_text(json.dumps(nb))
    assert not save_results(path, before, nbformat_read(path)) and json.loads(path.read_text()) == nb


def nbformat_read(path):
    import nbformat

    return nbformat.read(path, as_version=4)
