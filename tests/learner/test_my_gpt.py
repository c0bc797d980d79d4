"""`python -m autograder.my_gpt`: a learner trains and samples their own notebook-10 GPT from the command line,
on the loop of `python -m solutions_lib.gpt` (course_lib.gpt_training), with what a class is shipped."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from test_yours import _learner

pytestmark = pytest.mark.slow

NOTEBOOKS = ["05_self_attention", "06_multi_head_attention", "07_transformer_architecture", "09_bpe_tokenization",
             "10_a_gpt_of_your_own"]
TINY = ["--d-model", "16", "--h", "2", "--N", "1", "--d-ff", "32", "--block-size", "16", "--batch-size", "8",
        "--max-steps", "6", "--warmup", "2", "--no-progress"]


def _my_gpt(cwd, *args, cache=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    env.pop("NBGRADER_EXECUTION", None)
    env.pop("AUTOGRADER_QUICK", None)
    if cache:
        env["SEQCOURSE_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "autograder.my_gpt", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def _gpt_that_says_so():
    """The solution's GPT cell, with a line in its constructor that shows which GPT the command built."""
    nb = json.loads((ROOT / "solutions" / NOTEBOOKS[-1] / f"{NOTEBOOKS[-1]}.ipynb").read_text())
    source = next("".join(c["source"]) for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "GPT")
    assert "        super().__init__()\n" in source
    return source.replace("        super().__init__()\n", "        super().__init__()\n        print('the learner GPT is built')\n", 1)


def test_a_learner_trains_and_samples_their_own_gpt(tmp_path):
    course = _learner(tmp_path / "course", notebooks=NOTEBOOKS, broken={"GPT": _gpt_that_says_so()})
    ckpt = tmp_path / "mine.pt"
    run = _my_gpt(course, "train", *TINY, "--vocab-size", "262", "--checkpoint", str(ckpt), cache=tmp_path / "cache")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "train: your GPT, get_batch, nats_per_char (10); tokenizer: your encode and decode (09)", lines[0]
    assert "the learner GPT is built" in lines and "6 steps" in run.stdout and "V = 262" in run.stdout
    assert lines[-1].startswith("held-out ") and "s of training" in lines[-1] and lines[-1].endswith("from the command's start")
    state = torch.load(ckpt, weights_only=False)
    assert state["step"] == 6 and len(state["tokenizer"]["merges"]) == 6
    # sampling, from the notebook's own folder this time
    sample = _my_gpt(course / NOTEBOOKS[-1], "sample", "--checkpoint", str(ckpt), "--prompt", "ROMEO:", "--tokens", "12",
                     "--top-k", "5")
    assert sample.returncode == 0, sample.stdout + sample.stderr
    said, text = sample.stdout.split("\n", 1)
    assert said == "sample: your GPT, generate, beam_generate (10); tokenizer: your encode and decode (09)", said
    assert text.startswith("the learner GPT is built\nROMEO:") and len(text) > len("ROMEO:") + 30
    beam = _my_gpt(course, "sample", "--checkpoint", str(ckpt), "--prompt", "ROMEO:", "--tokens", "12", "--beam", "3")
    assert beam.returncode == 0, beam.stdout + beam.stderr
    assert beam.stdout.split("\n", 2)[2].startswith("ROMEO:") and "a beam of 3: log-probability " in beam.stderr


def test_a_learner_whose_beam_generate_is_not_done_samples_and_is_told_what_the_beam_needs(tmp_path):
    course = _learner(tmp_path / "course", notebooks=NOTEBOOKS, status={"beam_generate": "failed"})
    ckpt = tmp_path / "mine.pt"
    assert _my_gpt(course, "train", *TINY, "--checkpoint", str(ckpt), cache=tmp_path / "cache").returncode == 0
    sample = _my_gpt(course, "sample", "--checkpoint", str(ckpt), "--prompt", "ROMEO:", "--tokens", "8")
    assert sample.returncode == 0 and sample.stdout.startswith("sample: your GPT, generate (10); "), sample.stdout + sample.stderr
    beam = _my_gpt(course, "sample", "--checkpoint", str(ckpt), "--beam", "2")
    assert beam.returncode == 2, beam.stdout + beam.stderr
    assert "your notebook 10 cannot search with a beam yet: beam_generate (" in beam.stderr, beam.stderr
    assert "the check of beam_generate has not passed, failed" in beam.stderr, beam.stderr


def test_what_is_left_is_named_and_nothing_is_trained(tmp_path):
    course = _learner(tmp_path / "course", notebooks=NOTEBOOKS, status={"Block": "failed"})
    ckpt = tmp_path / "mine.pt"
    run = _my_gpt(course, "train", *TINY, "--checkpoint", str(ckpt))
    assert run.returncode == 2 and not ckpt.exists()
    assert "your notebook 10 cannot train yet: GPT (10: the check of Block has not passed, failed)" in run.stderr, run.stderr
    nowhere = _my_gpt(tmp_path, "train", *TINY)
    assert nowhere.returncode == 2 and "no 10_a_gpt_of_your_own.ipynb in" in nowhere.stderr, nowhere.stderr
    assert "run this command in your course folder" in nowhere.stderr


def test_without_a_passing_tokenizer_the_course_s_is_used_and_said(tmp_path):
    course = _learner(tmp_path / "course", notebooks=NOTEBOOKS, status={"merge_pair": "failed"})
    run = _my_gpt(course, "train", *TINY, "--tokenizer", "char", "--checkpoint", str(tmp_path / "c.pt"))
    assert run.returncode == 0, run.stdout + run.stderr
    first = run.stdout.splitlines()[0]
    assert first.startswith("train: your GPT, get_batch, nats_per_char (10); tokenizer: the course's encode and decode (")
    assert "the check of merge_pair has not passed, failed" in first
    not_a_checkpoint = tmp_path / "junk.pt"
    not_a_checkpoint.write_bytes(b"not a checkpoint")
    bad = _my_gpt(course, "sample", "--checkpoint", str(not_a_checkpoint))
    assert bad.returncode == 2 and "cannot be read as a checkpoint" in bad.stderr, bad.stderr


def test_once_notebook_11_passes_a_learner_trains_their_modern_gpt_with_muon_and_samples_it(tmp_path):
    course = _learner(tmp_path / "course", notebooks=NOTEBOOKS + ["11_a_gpt_as_trained_today"])
    ckpt = tmp_path / "modern.pt"
    # a CPU's recipe trains without Muon (course_lib.gpt_training.MODERN_CPU): --muon hands your split to it
    run = _my_gpt(course, "train", *TINY, "--vocab-size", "262", "--muon", "--checkpoint", str(ckpt), cache=tmp_path / "cache")
    assert run.returncode == 0, run.stdout + run.stderr
    first = run.stdout.splitlines()[0]
    assert first.startswith("train: your GPT, get_batch, nats_per_char (10), and your ModernGPT and split_parameters (11) "
                            "with notebook 11's recipe;"), first
    state = torch.load(ckpt, weights_only=False)
    assert (state["config"]["model"], state["config"]["muon"], state["step"]) == ("modern", True, 6)
    sample = _my_gpt(course, "sample", "--checkpoint", str(ckpt), "--prompt", "ROMEO:", "--tokens", "8")
    assert sample.returncode == 0, sample.stdout + sample.stderr
    assert sample.stdout.split("\n", 1)[1].startswith("ROMEO:")
    older = _my_gpt(course, "train", *TINY, "--vocab-size", "262", "--model", "gpt", "--checkpoint",
                    str(tmp_path / "ten.pt"), cache=tmp_path / "cache")
    assert older.returncode == 0, older.stdout + older.stderr
    ten = torch.load(tmp_path / "ten.pt", weights_only=False)["config"]
    assert (ten["model"], ten["muon"], ten["block_size"]) == ("gpt", False, 16)


def test_a_modern_gpt_whose_check_fails_leaves_notebook_10_s_recipe_and_says_why(tmp_path):
    course = _learner(tmp_path / "course", notebooks=NOTEBOOKS + ["11_a_gpt_as_trained_today"], status={"ModernGPT": "failed"})
    run = _my_gpt(course, "train", *TINY, "--vocab-size", "262", "--checkpoint", str(tmp_path / "g.pt"), cache=tmp_path / "cache")
    assert run.returncode == 0, run.stdout + run.stderr
    first = run.stdout.splitlines()[0]
    assert "; notebook 10's recipe, since your notebook 11 cannot train yet (" in first and "ModernGPT" in first, first
    assert torch.load(tmp_path / "g.pt", weights_only=False)["config"]["model"] == "gpt"
