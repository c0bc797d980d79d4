"""`python -m solutions_lib.train`, alone and under torchrun with 2 CPU processes."""
import os
import re
import subprocess
import sys

import pytest
import torch

from conftest import ROOT

TINY = ["--task", "copy", "--n-train", "256", "--n-test", "32", "--d-model", "16", "--h", "2", "--N", "1",
        "--d-ff", "32", "--batch-size", "16", "--max-steps", "6", "--eval-every", "3", "--no-progress"]


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    return env


@pytest.mark.slow
def test_train_cli_saves_and_resumes(tmp_path):
    ckpt = tmp_path / "copy.pt"
    run = subprocess.run([sys.executable, "-m", "solutions_lib.train", *TINY, "--checkpoint", str(ckpt)],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "held-out exact match" in run.stdout and ckpt.is_file()
    assert torch.load(ckpt, weights_only=False)["step"] == 6
    times = re.search(r"6 steps in ([\d.]+) s of training, ([\d.]+) s from the command's start", run.stdout)
    assert times, run.stdout  # the Deliver targets are one of each: the report gives both
    assert float(times[2]) >= float(times[1])
    again = subprocess.run([sys.executable, "-m", "solutions_lib.train", "--resume", str(ckpt), "--max-steps", "9",
                            "--checkpoint", str(ckpt), "--no-progress"],
                           cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert torch.load(ckpt, weights_only=False)["step"] == 9


@pytest.mark.slow
def test_torchrun_two_cpu_processes(tmp_path):
    ckpt = tmp_path / "ddp.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "solutions_lib.train", *TINY, "--checkpoint", str(ckpt)]
    run = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "2 process(es)" in run.stdout
    assert run.stdout.count("held-out exact match") == 1  # only process 0 reports
    assert torch.load(ckpt, weights_only=False)["step"] == 6


@pytest.mark.slow
def test_the_default_recipe_reaches_99_percent_on_held_out_dates(tmp_path):
    # The course's promise, with the command's defaults: no flag, no tuning.
    ckpt = tmp_path / "dates.pt"
    run = subprocess.run([sys.executable, "-m", "solutions_lib.train", "--no-progress", "--checkpoint", str(ckpt)],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "(reached 0.99)" in run.stdout, run.stdout[-2000:]
    assert max(torch.load(ckpt, weights_only=False)["history"]["exact_match"]) >= 0.99


# The steps notebook 11's CPU recipe, the command's default, trains in its 71 s on 2 quiet cores of the course's machine
# kind (measured 2026-12-02, bfloat16: 1240 to 1337 steps, 1.498 to 1.511 held-out nats per character; notebook 10's
# recipe beside it: 1601 steps, 1.543). course_lib.gpt_training.MODERN_RECIPES keeps the figures.
QUIET_CPU_STEPS = 1300


@pytest.mark.slow
def test_the_gpt_cpu_recipe_reaches_the_courses_promise_and_samples(tmp_path):
    # COURSE.md: on 2 CPU cores, below the strongest counting model (5-gram Kneser-Ney, 1.530) within 72 s. The test
    # trains the recipe for the steps a quiet machine fits into that time, its schedule over those steps: a busy or
    # slow machine trains the same model, only later. The time itself is benchmarks/bench_gpt.py's to measure.
    ckpt = tmp_path / "gpt.pt"
    # one thread, as every test on a worker has (93 s here, against two threads' 69 s on both cores)
    env = dict(_env(), SEQCOURSE_CACHE=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-m", "solutions_lib.gpt", "train", "--no-progress", "--checkpoint", str(ckpt),
                          "--max-seconds", "0", "--max-steps", str(QUIET_CPU_STEPS)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("held-out ") and last.endswith(" s from the command's start") and " s of training, " in last, last
    reached = float(last.split()[1])
    assert reached == pytest.approx(torch.load(ckpt, weights_only=False)["history"]["held_out"][-1], abs=0.005)
    assert reached < 1.53, run.stdout[-2000:]
    assert f"{QUIET_CPU_STEPS} steps" in run.stdout, run.stdout[-2000:]
    sample = subprocess.run([sys.executable, "-m", "solutions_lib.gpt", "sample", "--checkpoint", str(ckpt), "--prompt", "ROMEO:",
                             "--tokens", "60", "--temperature", "0.8"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert sample.returncode == 0, sample.stderr
    assert sample.stdout.startswith("ROMEO:") and len(sample.stdout) > 80, sample.stdout


GPT_TINY = ["--tokenizer", "char", "--d-model", "16", "--h", "2", "--N", "1", "--d-ff", "32", "--block-size", "16",
            "--batch-size", "4", "--max-seconds", "0", "--no-progress"]


@pytest.mark.slow
def test_the_gpt_command_trains_notebook_11_s_model_by_default_resumes_muon_and_samples(tmp_path):
    ckpt = tmp_path / "modern.pt"
    env = dict(_env(), SEQCOURSE_CACHE=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-m", "solutions_lib.gpt", "train", *GPT_TINY, "--max-steps", "4", "--muon",
                          "--checkpoint", str(ckpt)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    state = torch.load(ckpt, weights_only=False)
    assert (state["config"]["model"], state["config"]["muon"]) == ("modern", True)  # modern: the default
    assert set(state["optimizer"]) == {"muon", "adamw"} and state["optimizer"]["muon"]["state"], "Muon kept no momentum"
    assert not any(name.startswith("pos_embed") for name in state["model"]), "rotary positions need no embedding"
    again = subprocess.run([sys.executable, "-m", "solutions_lib.gpt", "train", "--resume", str(ckpt), "--max-steps", "6",
                            "--checkpoint", str(ckpt), "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert torch.load(ckpt, weights_only=False)["step"] == 6
    sample = subprocess.run([sys.executable, "-m", "solutions_lib.gpt", "sample", "--checkpoint", str(ckpt), "--prompt", "RO",
                             "--tokens", "20"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert sample.returncode == 0 and sample.stdout.startswith("RO"), sample.stderr


@pytest.mark.parametrize("model, muon, kind", [("gpt", "--no-muon", "GPT"), ("rope+qk_norm", "--muon", "VariantGPT")])
def test_the_gpt_command_trains_notebook_10_s_gpt_and_each_change_on_request(tmp_path, model, muon, kind):
    ckpt = tmp_path / "gpt.pt"
    env = dict(_env(), SEQCOURSE_CACHE=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-m", "solutions_lib.gpt", "train", *GPT_TINY, "--max-steps", "2", "--model", model,
                          muon, "--checkpoint", str(ckpt)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    state = torch.load(ckpt, weights_only=False)
    assert state["config"]["model"] == model and ("muon" in state["optimizer"]) == (muon == "--muon")
    assert any(name.startswith("pos_embed") for name in state["model"]) == (kind == "GPT")


def test_an_unknown_change_is_refused_with_the_list_of_changes(tmp_path):
    run = subprocess.run([sys.executable, "-m", "solutions_lib.gpt", "train", *GPT_TINY, "--model", "rope+swiglu"],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 2 and "rms_norm+rope+qk_norm+relu2+zero_init+muon" in run.stderr, run.stderr
