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


# The steps the CPU recipe trains in its 71 s on 2 quiet cores of the course's machine kind (measured 2026-11-28,
# bfloat16: 3233 steps, 1.52 held-out nats per character, seed 0, scored by windows side by side). Scored fairly
# (held_out_loss), these 3200 steps reach 1.507, 1.513 and 1.515 with seeds 0, 1 and 2.
QUIET_CPU_STEPS = 3200


@pytest.mark.slow
def test_the_gpt_cpu_recipe_reaches_the_courses_promise_and_samples(tmp_path):
    # COURSE.md: on 2 CPU cores, at most 1.55 held-out nats per character within 72 s. The test trains the
    # recipe for the steps a quiet machine fits into that time, its schedule over those steps: a busy or
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
    assert reached <= 1.55, run.stdout[-2000:]
    assert f"{QUIET_CPU_STEPS} steps" in run.stdout, run.stdout[-2000:]
    sample = subprocess.run([sys.executable, "-m", "solutions_lib.gpt", "sample", "--checkpoint", str(ckpt), "--prompt", "ROMEO:",
                             "--tokens", "60", "--temperature", "0.8"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert sample.returncode == 0, sample.stderr
    assert sample.stdout.startswith("ROMEO:") and len(sample.stdout) > 80, sample.stdout
