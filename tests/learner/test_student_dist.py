"""The student distribution (`python -m autograder release --student-dist DIR`): what a class gets.

It holds no reference code, no solutions and no hidden case, and runs where
neither `solutions_lib` nor `autograder.assignments` can be imported; there,
a correct notebook passes every check and a catalogued mistake gets the
diagnosis the repository's own checks give.
"""
import json
import os
import subprocess
import sys
import warnings

import nbformat
import pytest
import torch
from torch import nn

import solutions_lib.attention as attention
import solutions_lib.multihead as multihead
import solutions_lib.positional as positional
import solutions_lib.transformer as transformer
import course_lib.attention
import course_lib.multihead
import course_lib.positional
import course_lib.transformer
from autograder import registry
from autograder import ship
from autograder.release import student_dist
from autograder.__main__ import main
from autograder.check_notebook import execute
from autograder.checks.driver import check_exercise
from autograder.reference_data import exercise_from
from autograder.release import fill_submission, mistake_source
from autograder.results import notebook_results
from conftest import ASSIGNMENTS, ROOT

EXERCISES = registry.all_exercises()
NOTEBOOK = "06_multi_head_attention"  # run end to end in the distribution: it uses stand-ins (the masks)

# Put first on PYTHONPATH, it hides the repository from every process started from there, notebook
# kernels included: the .venv's editable install of the repository (its import finder) goes, and the
# reference and the assignment modules cannot be imported at all.
BLOCKER = '''
import sys

sys.meta_path[:] = [f for f in sys.meta_path if "Editable" not in getattr(f, "__name__", type(f).__name__)]


class NotInTheStudentDistribution:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "solutions_lib" or name.startswith("autograder.assignments"):
            raise ModuleNotFoundError(f"No module named {name!r} (not in the student distribution)")


sys.meta_path.insert(0, NotInTheStudentDistribution())
'''

PROBE = """
import autograder
try:
    import solutions_lib
    print("PROBE reference importable")
except ImportError:
    print("PROBE", autograder.__file__)
"""


# ---------------------------------------------------------------- the stand-ins (fast)


def test_masks_and_encoding_match_the_reference():
    for T in (1, 4, 7):
        assert torch.equal(course_lib.attention.causal_mask(T), attention.causal_mask(T))
    lengths = torch.tensor([3, 1, 5])
    assert torch.equal(course_lib.attention.padding_mask(lengths, 5), attention.padding_mask(lengths, 5))
    assert torch.equal(course_lib.attention.padding_mask(lengths, 6), attention.padding_mask(lengths, 6))
    for T, d, dtype in [(10, 16, torch.float32), (7, 5, torch.float64), (50, 64, torch.float32)]:
        torch.testing.assert_close(course_lib.positional.sinusoidal_positional_encoding(T, d, dtype=dtype),
                                   positional.sinusoidal_positional_encoding(T, d, dtype=dtype))


def test_attention_stand_ins_match_the_reference_with_the_same_weights():
    torch.manual_seed(0)
    x, memory = torch.randn(3, 5, 8, dtype=torch.float64), torch.randn(3, 6, 8, dtype=torch.float64)
    allowed = attention.padding_mask(torch.tensor([6, 2, 4]), 6)
    allowed[1, 0, :] = False  # one sequence with nothing to attend to
    pairs = [(course_lib.attention.SelfAttention(8, 4), attention.SelfAttention(8, 4), (x, attention.causal_mask(5))),
             (course_lib.multihead.MultiHeadAttention(8, 2), multihead.MultiHeadAttention(8, 2), (x, memory, memory, allowed)),
             (course_lib.multihead.MultiHeadAttention(8, 4), multihead.MultiHeadAttention(8, 4), (x, x, x))]
    for mine, ref, inputs in pairs:
        mine, ref = mine.double(), ref.double()
        mine.load_state_dict(ref.state_dict())
        out, weights = mine(*inputs)
        ref_out, ref_weights = ref(*inputs)
        torch.testing.assert_close(out, ref_out)
        torch.testing.assert_close(weights, ref_weights)
        grads = torch.autograd.grad(out.sum(), list(mine.parameters()))
        ref_grads = torch.autograd.grad(ref_out.sum(), list(ref.parameters()))
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r)
    assert course_lib.multihead.count_parameters(pairs[1][0]) == multihead.count_parameters(pairs[1][1])


def test_pytorch_weight_converters_match_the_reference():
    torch.manual_seed(1)
    enc = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    dec = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True)
    for mine, ref in [(course_lib.transformer.encoder_layer_state_from_pytorch(enc), transformer.encoder_layer_state_from_pytorch(enc)),
                      (course_lib.transformer.decoder_layer_state_from_pytorch(dec), transformer.decoder_layer_state_from_pytorch(dec))]:
        assert mine.keys() == ref.keys()
        for k in ref:
            assert torch.equal(mine[k], ref[k]), k


def test_transformer_stand_in_has_the_course_interface():
    torch.manual_seed(2)
    model = course_lib.transformer.Transformer(11, 13, d_model=16, h=2, N=2, d_ff=32, dropout=0.0, max_len=20).eval()
    src, tgt = torch.randint(3, 11, (2, 6)), torch.randint(3, 13, (2, 5))
    src[1, 4:] = 0
    src_mask = (src != 0).unsqueeze(1)
    logits = model(src, tgt, src_mask)
    assert logits.shape == (2, 5, 13)
    other = src.clone()
    other[1, 4:] = 7  # padding may be anything
    torch.testing.assert_close(model(other, tgt, src_mask), logits)
    later = tgt.clone()
    later[:, 3:] = 4  # the future does not change earlier positions
    torch.testing.assert_close(model(src, later, src_mask)[:, :3], logits[:, :3])
    torch.testing.assert_close(model.decode(model.encode(src, src_mask), tgt, src_mask), logits)
    weights = course_lib.transformer.cross_attention(model, src, tgt)
    assert weights.shape == (2, 2, 5, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 5))
    assert float(weights[1, ..., 4:].abs().max()) == 0.0


# ---------------------------------------------------------------- precomputed checks (fast)


@pytest.mark.parametrize("notebook", ASSIGNMENTS)
def test_precomputed_checks_agree_with_the_repository(notebook):
    """Stored (as the distribution and the grading sandbox ship them: autograder.ship.notebook_data), the reference
    passes and each catalogued mistake fails on the same cases, with the same reason and diagnosis, as in the
    repository's check on the public cases."""
    data = torch.load(ship.notebook_data(ROOT, notebook), weights_only=False)
    exercises = registry.for_notebook(notebook)
    assert [entry["name"] for entry in data["exercises"]] == [ex.name for ex in exercises]
    for ex, entry in zip(exercises, data["exercises"]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stored = exercise_from(entry)
            assert check_exercise(stored, ex.reference).fraction == 1.0, ex.name
            for m in ex.mistakes:
                here, there = check_exercise(ex, m.impl), check_exercise(stored, m.impl)
                assert [(r.case.label, r.ok, r.problem, r.diagnosis) for r in there.results] == \
                    [(r.case.label, r.ok, r.problem, r.diagnosis) for r in here.results], (ex.name, m.name)


def test_the_leak_check_finds_reference_code(tmp_path):
    (tmp_path / "copied.py").write_text((ROOT / "solutions_lib" / "attention.py").read_text().replace("solutions_lib", "x"))
    found = {what for _, what in ship.leaks(tmp_path)}
    assert any(w.startswith("scaled_dot_product_attention: reference") for w in found)
    assert any(w.startswith("causal_mask: reference") for w in found)


def test_a_folder_that_is_not_empty_is_refused(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["release", "--student-dist", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err and (tmp_path / "keep.txt").exists()


# ---------------------------------------------------------------- the install and the text a class reads (fast)


def install_script(folder):
    path = folder / "install.py"
    path.write_text(student_dist.INSTALL.replace("{torch}", student_dist.torch_requirement(ROOT)))
    return path


def test_the_install_takes_pytorchs_cpu_build_on_linux_without_an_nvidia_gpu(tmp_path):
    """PyPI's torch for Linux is the CUDA build (a 5.9 GB environment on a machine without a GPU, issue 59): there the
    install takes the CPU build from PyTorch's index first; on macOS, Windows and with a GPU it takes PyPI's."""
    namespace = {}
    exec(install_script(tmp_path).read_text().replace('if __name__ == "__main__":', "if False:"), namespace)
    commands = namespace["commands"]
    cpu = [sys.executable, "-m", "pip", "install", "torch>=2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu"]
    editable = [sys.executable, "-m", "pip", "install", "-e", ".[check]"]
    assert commands(system="Linux", gpu=False) == [cpu, editable]
    for system, gpu in [("Linux", True), ("Darwin", False), ("Windows", False), ("Windows", True)]:
        assert commands(system=system, gpu=gpu) == [editable], (system, gpu)
    if sys.platform != "linux":
        return
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (fake / "nvidia-smi").chmod(0o755)
    said = {}
    for gpu, path in [(False, "/usr/bin:/bin"), (True, f"{fake}:/usr/bin:/bin")]:
        done = subprocess.run([sys.executable, "install.py", "--dry-run"], cwd=tmp_path, env=dict(os.environ, PATH=path),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        said[gpu] = done.stdout
    assert said[False] == ('$ python -m pip install "torch>=2.13.0" --index-url https://download.pytorch.org/whl/cpu\n'
                           '$ python -m pip install -e ".[check]"\n')
    assert said[True] == '$ python -m pip install -e ".[check]"\n'


def test_the_readme_says_how_to_install_and_how_large_it_is():
    readme = student_dist.README.replace("{torch}", student_dist.torch_requirement(ROOT))
    assert "    python install.py\n" in readme
    assert 'pip install "torch>=2.13.0" --index-url https://download.pytorch.org/whl/cpu' in readme  # by hand, one line
    assert "macOS" in readme and "NVIDIA GPU" in readme
    assert "1.4 GB" in readme and "du -sh" in readme  # the size, and how it was measured


NB10 = "10_a_gpt_of_your_own"  # whatever COURSE_ASSIGNMENTS narrows the notebooks to


def student_versions():
    for name in ASSIGNMENTS:
        yield name, student_dist.student_notebook(nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4))


def test_the_student_version_offers_nothing_that_only_the_repository_has(tmp_path):
    ship.write_package(ROOT, tmp_path)
    for name, nb in student_versions():
        assert student_dist.not_shipped(nb, tmp_path, tmp_path / "notebooks" / name) == [], name
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert "Still stuck? Ask your instructor" in text, name  # reveal() only says there that it is not shipped
    nb10 = student_dist.student_notebook(nbformat.read(ROOT / "solutions" / NB10 / f"{NB10}.ipynb", as_version=4))
    command = next(c.source for c in nb10.cells if "Outside the notebook: your GPT as a command" in c.source)
    # the distribution ships autograder.my_gpt, so it keeps the section that explains the command and its budgets
    assert "python -m autograder.my_gpt train" in command and "72 s" in command and "45 s" in command
    assert (tmp_path / "autograder" / "my_gpt.py").is_file()


def test_what_a_notebook_names_that_the_distribution_lacks_is_found(tmp_path):
    ship.write_package(ROOT, tmp_path)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text) for text in [
        'Stuck? `reveal("causal_mask")`.',
        "`benchmarks/bench_gpt.py` reimplements it; [docs/X.md](https://github.com/seqcourse/seqcourse/blob/main/docs/X.md)",
        "python -m solutions_lib.train --task reverse; python -m autograder.my_gpt train; python -m autograder progress",
        "python -m autograder.train_gpt; see [the notes](../NOTES.md) and [above](#section-1)",
    ]] + [nbformat.v4.new_code_cell("from autograder import check, reveal")])
    found = student_dist.not_shipped(nb, tmp_path, tmp_path / "notebooks" / "10_a_gpt_of_your_own")
    assert found == [(0, "reveal(: not in the student distribution"), (1, "benchmarks/bench_gpt.py: not in the student distribution"),
                     (2, "solutions_lib: not in the student distribution"),
                     (2, "python -m solutions_lib.train: not in the student distribution"),
                     (3, "python -m autograder.train_gpt: not in the student distribution"),
                     (3, "a link to ../NOTES.md: not in the student distribution")], found


# ---------------------------------------------------------------- the distribution itself (slow)


@pytest.fixture(scope="session")
def dist(tmp_path_factory):
    dest = tmp_path_factory.mktemp("student") / "dist"
    shipped = student_dist.build(ROOT, dest, echo=lambda *a: None)
    assert len(shipped) == len({ex.notebook for ex in EXERCISES}), "every notebook is in the distribution"
    blocker = tmp_path_factory.mktemp("blocker")
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=f"{blocker}{os.pathsep}{dest}")
    env.pop("NBGRADER_EXECUTION", None)
    return dest, env


def in_dist(dist, code, *args):
    dest, env = dist
    result = subprocess.run([sys.executable, "-c", code, *args], cwd=dest, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_no_reference_solution_or_hidden_case_ships(dist):
    dest, _ = dist
    assert ship.leaks(dest) == []
    assert not any(p.name in ("solutions", "solutions_lib", "assignments") for p in dest.rglob("*"))
    for path, chunks in ship.texts(dest).items():
        assert not any("solutions_lib" in text or "BEGIN SOLUTION" in text for text in chunks), path
    for path in (dest / "autograder" / "data").glob("*.pt"):
        for stored in torch.load(path, weights_only=False)["exercises"]:
            public = [c.label for c in registry.get(stored["name"]).cases() if not c.hidden]
            assert [c["label"] for c in stored["cases"]] == public, stored["name"]
            for c in stored["cases"]:
                assert not ship._not_shipped_modules(ship.pickled_modules(c["call"]))
        assert not ship._not_shipped_modules(ship.pickled_modules(path.read_bytes()))


@pytest.mark.slow
def test_the_texts_ship_with_course_lib(dist):
    out = in_dist(dist, "from course_lib.text import shakespeare; import course_lib; print(len(shakespeare()), course_lib.__file__)")
    length, where = out.split()
    assert int(length) == len((ROOT / "course_lib" / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8"))
    assert where.startswith(str(dist[0])), "course_lib came from the distribution, not the repository"


@pytest.mark.slow
def test_every_check_loads_without_the_reference(dist):
    out = in_dist(dist, """
import autograder, autograder.registry as r
from autograder.checks.driver import check_exercise
for name in ("solutions_lib", "autograder.assignments", "autograder.release", "autograder.grading.grade"):
    try:
        __import__(name)
        raise SystemExit(name + " is importable")
    except ImportError:
        pass
def stub(*args, **kwargs):
    raise NotImplementedError()
for ex in r.all_exercises():
    for case in ex.cases():
        case.make()
    assert check_exercise(ex, stub).not_implemented, ex.name
print(autograder.__file__, len(r.all_exercises()))
""")
    where, n = out.split()
    assert where.startswith(str(dist[0])) and int(n) == len(EXERCISES)


def graded_in_dist(dist, notebooks):
    """{path: (rows, probe line)} for notebooks executed in the distribution, as its `check` command does."""
    out = in_dist(dist, """
import json, sys
from autograder.check_notebook import execute
from autograder.results import notebook_results
found = {}
for path in sys.argv[1:]:
    nb = execute(path)
    probe = [o.text for o in nb.cells[-1].outputs if o.output_type == "stream"]
    found[path] = ([r.__dict__ for r in notebook_results(nb)], "".join(probe).strip())
print(json.dumps(found))
""", *map(str, notebooks))
    return json.loads(out.splitlines()[-1])


def graded_in_repository(nb, folder):
    path = folder / "in_the_repository.ipynb"
    nbformat.write(nb, path)
    return [r.__dict__ for r in notebook_results(execute(path))]


@pytest.mark.slow
def test_a_notebook_gets_the_same_grades_and_diagnoses_in_both(dist, tmp_path):
    dest, _ = dist
    released = nbformat.read(dest / "notebooks" / NOTEBOOK / f"{NOTEBOOK}.ipynb", as_version=4)
    solution = nbformat.read(ROOT / "solutions" / NOTEBOOK / f"{NOTEBOOK}.ipynb", as_version=4)
    mistakes = {}
    for exercise_name, mistake_name in registry.demo_mistakes(NOTEBOOK):
        mistake = next(m for m in registry.get(exercise_name).mistakes if m.name == mistake_name)
        mistakes[exercise_name] = mistake_source(exercise_name, mistake)
    submissions = {"complete": fill_submission(released, solution), "mistakes": fill_submission(released, solution, mistakes)}
    paths = {}
    for student, nb in submissions.items():
        nb.cells.append(nbformat.v4.new_code_cell(PROBE))
        paths[student] = dest / "notebooks" / NOTEBOOK / f"{student}.ipynb"
        nbformat.write(nb, paths[student])
    graded = graded_in_dist(dist, paths.values())

    rows, probe = graded[str(paths["complete"])]
    assert probe == f"PROBE {dest / 'autograder' / '__init__.py'}"
    assert {r["exercise"] for r in rows} == {ex.name for ex in registry.for_notebook(NOTEBOOK)}
    assert all(r["status"] == "passed" and r["score"] == r["points"] for r in rows), rows
    assert graded_in_repository(submissions["complete"], tmp_path) == rows

    rows, _ = graded[str(paths["mistakes"])]
    failed = {r["exercise"]: r["reason"] for r in rows if r["status"] != "passed"}
    assert failed.keys() == mistakes.keys()
    for exercise_name, mistake_name in registry.demo_mistakes(NOTEBOOK):
        says = next(m.says for m in registry.get(exercise_name).mistakes if m.name == mistake_name)
        # a mistake built on another failed exercise is sent back to that one first (in a learner's kernel;
        # the grader names both, tests/grading/test_demo.py)
        blocked = set(registry.get(exercise_name).depends_on) & set(failed)
        assert failed[exercise_name].endswith(f"Likely mistake: {says}") or blocked and "fix that first" in failed[exercise_name]
    assert graded_in_repository(submissions["mistakes"], tmp_path) == rows


@pytest.mark.slow
def test_the_distribution_installs_as_its_readme_says_and_its_notebooks_name_only_what_it_ships(dist):
    dest, env = dist
    assert 'pip install "torch>=2.13.0" --index-url https://download.pytorch.org/whl/cpu' in (dest / "README.md").read_text()
    done = subprocess.run([sys.executable, "install.py", "--dry-run"], cwd=dest, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.endswith('$ python -m pip install -e ".[check]"\n'), done.stderr
    for path in sorted((dest / "notebooks").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        assert student_dist.not_shipped(nb, dest, path.parent) == [], path.name


@pytest.mark.slow
def test_reveal_and_progress_in_the_distribution(dist):
    from autograder.reveal import NOT_SHIPPED

    out = in_dist(dist, "from autograder import reveal\nreveal('causal_mask')")
    assert out.strip() == NOT_SHIPPED
    dest, env = dist
    done = subprocess.run([sys.executable, "-m", "autograder", "progress", "notebooks"], cwd=dest, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "05_self_attention" in done.stdout and "not run yet" in done.stdout, done.stderr


@pytest.mark.slow
def test_a_class_trains_and_samples_its_own_gpt_from_the_command_line(dist, tmp_path):
    # what README's students item 6 promises, with what a class is shipped
    from test_my_gpt import NOTEBOOKS, TINY
    from test_yours import _learner

    course = _learner(tmp_path / "course", notebooks=NOTEBOOKS)
    _, env = dist
    ckpt = tmp_path / "mine.pt"

    def my_gpt(*args):
        return subprocess.run([sys.executable, "-m", "autograder.my_gpt", *args], cwd=course, env=dict(env, OMP_NUM_THREADS="1"),
                              capture_output=True, text=True, timeout=600)

    run = my_gpt("train", *TINY, "--tokenizer", "char", "--checkpoint", str(ckpt))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("train: your GPT, get_batch, nats_per_char (10); tokenizer: your encode and decode (09)")
    sample = my_gpt("sample", "--checkpoint", str(ckpt), "--prompt", "ROMEO:", "--tokens", "10")
    assert sample.returncode == 0 and sample.stdout.split("\n", 1)[1].startswith("ROMEO:"), sample.stderr[-3000:]


# Natural first mistakes that no catalogue entry names, each an edit of the reference (exercise, old, new): the
# distribution's check must name each from how its output, or the line that raised, relates to the reference.
FIRST_MISTAKES = [
    ("rnn_cell", "h_prev @ W_hh.T", "h_prev @ W_hh", "what the reference computes with W_hh transposed"),
    ("rnn_forward", "        h_t = rnn_cell(x[:, t], h_t, W_ih, W_hh, b_ih, b_hh)\n        outputs.append(h_t)",
     "        outputs.append(h_t)\n        h_t = rnn_cell(x[:, t], h_t, W_ih, W_hh, b_ih, b_hh)",
     "shifted one step along axis 1 (T, size 5): your second entry there is the reference's first"),
    ("transition_matrix", "counts / totals.clamp_min(1)", "counts / totals", "where yours divides 0 by 0"),
    ("dot_score", "(H @ s.unsqueeze(-1)).squeeze(-1)", "s @ H.transpose(1, 2)", "is paired with every other, as broadcasting does"),
    ("AdditiveScore", "self.W2(s).unsqueeze(1)", "self.W2(s)", "self.W2(s): (2, 4) float32"),
    ("permutation_gap", "(f(x[:, perm]) - f(x)[:, perm])", "(f(x[perm]) - f(x)[perm])",
     "x: (2, 6, 8) float32; the docstring says (B, T, d)"),
    ("shift_matrix", "    if d_model % 2:\n        raise ValueError(", "    if False:\n        raise ValueError(",
     "where the text asks for a ValueError"),
    ("get_batch", "starts[:, None] + torch.arange(block_size, device=data.device)",
     "starts[:, None] + torch.arange(1, block_size + 1, device=data.device)",
     "Your x is the reference's shifted one step along axis 1 (block_size, size 8)"),
    ("Block", "x = x + self.dropout(self.attend(self.ln1(x), cache, i))\n        return x + self.dropout(self.ffn(self.ln2(x)))",
     "x = self.ln1(x + self.dropout(self.attend(x, cache, i)))\n        return self.ln2(x + self.dropout(self.ffn(x)))",
     "normalised by ln2 along axis 2 (size 8)"),
    ("KVCache", "torch.cat([self.keys[i], k], dim=2), torch.cat([self.values[i], v], dim=2)",
     "torch.cat([self.keys[i], k], dim=1), torch.cat([self.values[i], v], dim=1)",
     "dim=1 is axis h of self.keys[i]'s (B, h, T_cached, d_k)"),
]


@pytest.mark.slow
def test_first_mistakes_are_named_without_a_catalogue(dist):
    from autograder.mutants import source_of

    sources = {}
    for name, old, new, _ in FIRST_MISTAKES:
        reference = getattr(registry.get(name).reference, "__wrapped__", registry.get(name).reference)
        assert source_of(reference).count(old) == 1, name
        sources[name] = source_of(reference).replace(old, new)
    sources["rnn_forward"] = source_of(registry.get("rnn_cell").reference) + "\n\n" + sources["rnn_forward"]
    out = in_dist(dist, """
import contextlib, io, json, linecache, math, sys
import torch
import torch.nn.functional as F
from torch import nn
from autograder import CheckFailed, api, check, registry
from course_lib.attention import causal_mask
from course_lib.gpt import FeedForward, LayerNorm
from course_lib.multihead import MultiHeadAttention

said = {}
for name, source in json.loads(sys.argv[1]).items():
    registry.get(name).mistakes = []  # nothing catalogued: the check must find the words itself
    api._passed.clear()
    namespace, cell = dict(globals()), f"<learner's {name}>"
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)  # as IPython keeps a cell's lines
    exec(compile(source, cell, "exec"), namespace)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            check(name, namespace[name])
        said[name] = printed.getvalue()
    except CheckFailed as e:
        said[name] = "\\n".join(e.lines)
print(json.dumps(said))
""", __import__("json").dumps(sources))
    said = __import__("json").loads(out.splitlines()[-1])
    for name, _, _, words in FIRST_MISTAKES:
        assert words in said[name], (name, said[name])
        assert "Likely mistake" not in said[name], name


@pytest.mark.slow
def test_a_catalogue_sentence_quoting_code_the_learner_did_not_write_gives_way_in_the_distribution_too(dist):
    """The catalogue's "k.T reverses every axis" is said to a learner who wrote k.T, and not to one who wrote
    k.transpose(1, 2) (fine on (B, T, d), wrong with a head axis): the distribution has no edit to read what the
    sentence quotes, so it ships that with the sentence (autograder.checks.catalogue.quoted)."""
    out = in_dist(dist, """
import contextlib, io, json, linecache, math
from autograder import CheckFailed, check

said = {}
for body in ("q @ k.T", "q @ k.transpose(1, 2)"):
    source = f"def attention_scores(q, k):\\n    return {body} / math.sqrt(q.size(-1))\\n"
    namespace, cell = {"math": math}, f"<learner's {body}>"
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
    exec(compile(source, cell, "exec"), namespace)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check("attention_scores", namespace["attention_scores"])
    except CheckFailed as e:
        said[body] = " ".join(e.lines)
print(json.dumps(said))
""")
    said = __import__("json").loads(out.splitlines()[-1])
    k_dot_T = next(m for m in registry.get("attention_scores").mistakes if m.name == "k_dot_T")
    assert k_dot_T.says in said["q @ k.T"]
    assert "reverses every axis" not in said["q @ k.transpose(1, 2)"]
    assert "Your code is right on every case whose inputs have 3 axes and wrong on every case with 4" in said["q @ k.transpose(1, 2)"]


# (exercise, the reference's code, the learner's, words of the sentence): mistakes the edits of the reference's own
# source name (autograder.checks.edits); the distribution reads those edits' outcomes, precomputed (autograder.ship)
EDITED_MISTAKES = [
    ("warmup_lr", "step = max(step, 1)", "step = step + 1", "off by one step"),
    ("length_penalty", "((5 + length) / 6) ** alpha", "(5 + length) / 6 ** alpha", "when grouped as (5 + length) / (6 ** alpha)"),
    ("EncoderLayer", "self.norm2(x + self.dropout(self.ffn(x)))", "self.norm2(self.dropout(self.ffn(x)))",
     "the residual connection (its input x added back) is left out"),
    ("scaled_dot_product_attention", "    scores = attention_scores(q, k)\n",
     "    d_k = k.shape[1]\n    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)\n",
     "with T_k (size 6) where the text's d_k (size 8) belongs"),
]
EDITED_PREAMBLE = """
import contextlib, io, json, linecache, math, sys
import torch
import torch.nn.functional as F
from torch import nn
from course_lib.gpt import FeedForward, LayerNorm
from course_lib.multihead import MultiHeadAttention
"""


@pytest.mark.slow
def test_edits_of_the_reference_name_mistakes_without_it(dist):
    """With nothing catalogued, a number off by one step, a formula grouped another way, a residual left out and a
    size read from another axis are named in the distribution, in the very sentence the repository says."""
    from autograder.mutants import source_of

    sources, here = {}, {}
    for name, old, new, words in EDITED_MISTAKES:
        reference = getattr(registry.get(name).reference, "__wrapped__", registry.get(name).reference)
        assert source_of(reference).count(old) == 1, name
        sources[name] = source_of(reference).replace(old, new)
        namespace = {}
        exec(EDITED_PREAMBLE + sources[name], namespace)
        ex = registry.get(name)
        saved = ex.mistakes
        try:
            ex.mistakes = []
            here[name] = check_exercise(ex, namespace[name]).failures()[0].relation
        finally:
            ex.mistakes = saved
        assert words in here[name], (name, here[name])
    out = in_dist(dist, EDITED_PREAMBLE + """
from autograder import CheckFailed, api, check, registry

said = {}
for name, source in json.loads(sys.argv[1]).items():
    registry.get(name).mistakes = []  # nothing catalogued: the edits must find the words
    api._passed.clear()
    namespace, cell = dict(globals()), f"<learner's {name}>"
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
    exec(compile(source, cell, "exec"), namespace)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(name, namespace[name])
        said[name] = "passed"
    except CheckFailed as e:
        said[name] = " ".join(e.lines)
print(json.dumps(said))
""", __import__("json").dumps(sources))
    said = __import__("json").loads(out.splitlines()[-1])
    for name, _, _, words in EDITED_MISTAKES:
        assert " ".join(here[name].split()) in " ".join(said[name].split()), (name, here[name], said[name])
