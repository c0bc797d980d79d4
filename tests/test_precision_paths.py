"""Every machine class's code path, on this CPU: notebooks 08 and 10 run under a grader's budget of steps in each
precision the course trains in ($SEQCOURSE_PRECISION forces it): bfloat16 autocast (a CPU with bfloat16 units, an
A100/H100), float32 (most CPUs, Apple's GPU), and float16 autocast with a gradient scaler, the path of a T4, which
PyTorch runs on a CPU too. Each run must say in its first line which precision and class it trains in, and the
text's claims must be evaluated for that class: shown, or said not to be, never assumed of 0 steps.
"""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

PATHS = {  # SEQCOURSE_PRECISION: what the training cells' first line says, and the machine class
    "bfloat16": ("under bfloat16 autocast (SEQCOURSE_PRECISION=bfloat16)", "cpu-bfloat16"),
    "float32": ("in float32 (SEQCOURSE_PRECISION=float32)", "cpu-float32"),
    "float16": ("under float16 autocast with a gradient scaler (SEQCOURSE_PRECISION=float16)", "cpu-float16"),
}


def run_notebook(name, precision):
    """The solution notebook's code cells as one script, under a grader's budget, in this precision: its output."""
    env = {**os.environ, "AUTOGRADER_QUICK": "1", "SEQCOURSE_PRECISION": precision, "MPLBACKEND": "Agg",
           "PYTHONWARNINGS": "ignore::UserWarning"}
    notebook = ROOT / "solutions" / name / f"{name}.ipynb"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "notebook_as_script.py"), str(notebook)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{name} under {precision}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.parametrize("precision", sorted(PATHS))
def test_notebook_08_trains_in_each_precision(precision):
    said, machine = PATHS[precision]
    out = run_notebook("08_training_a_transformer", precision)
    first = next(line for line in out.splitlines() if line.startswith("training on"))
    assert first == f"training on cpu {said}; machine class {machine}", first
    assert "reverse: exact match" in out and "held-out exact match" in out, out[-2000:]


@pytest.mark.parametrize("precision", sorted(PATHS))
def test_notebook_10_trains_in_each_precision_and_evaluates_its_classes_claims(precision):
    said, machine = PATHS[precision]
    out = run_notebook("10_a_gpt_of_your_own", precision)
    first = next(line for line in out.splitlines() if line.startswith("training on"))
    assert first.startswith(f"training on cpu {said}: machine class {machine}; 20 steps (a grader's budget)"), first
    if machine == "cpu-float16":  # a T4's path, on a class the course has not measured: it says so
        assert "the course has not measured cpu-float16 (a forced precision) yet" in first, first
        assert "Not shown on this machine: the text's figures for a full run. A grader's budget of 20 steps" in out, out[-3000:]
    else:
        assert re.search(r"the text expects about [1-9][0-9]* steps, as on ", first), first
        assert "Not shown on this machine: between" in out and "A grader's budget of 20 steps" in out, out[-3000:]
    assert "held-out" in out and "nats per character" in out
