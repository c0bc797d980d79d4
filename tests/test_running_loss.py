"""The training commands' mean loss between evaluations (course_lib.training.RunningLoss): the right mean, and no
tensor kept per step. A list of every step's 0-dim loss, its predecessor, pinned glibc's heap between the steps'
large buffers: `python -m solutions_lib.gpt train` grew by about 4 MB a step, to 18 GB in four minutes."""
import gc
import math

import pytest
import torch

from course_lib import gpt_training
from course_lib.training import RunningLoss


def live_tensors():
    gc.collect()
    return sum(type(o) is torch.Tensor for o in gc.get_objects())


def test_the_mean_since_the_last_reading_then_a_fresh_start():
    running = RunningLoss()
    assert math.isnan(running.read())
    for x in (2.0, 3.0, 7.0):
        running.add(torch.tensor(x, requires_grad=True) * 1.0)  # a loss with a graph behind it
    assert running.read() == 4.0
    assert math.isnan(running.read())  # nothing added since
    running.add(torch.tensor(1.5))
    assert running.read() == 1.5


def test_no_tensor_is_kept_per_step_and_no_graph():
    running = RunningLoss()
    running.add(torch.tensor(1.0))
    total, before = running.total, live_tensors()
    for step in range(200):
        w = torch.ones(3, requires_grad=True)
        running.add((w * step).sum())
    del w
    assert running.total is total and not running.total.requires_grad
    assert live_tensors() <= before
    assert running.read() == pytest.approx((1 + sum(3 * s for s in range(200))) / 201)


def test_the_gpt_command_keeps_its_losses_in_one_running_mean():
    # the loop's losses are a RunningLoss, read by each evaluation: the command's history holds floats
    cfg = gpt_training.Config(tokenizer="char", d_model=16, h=2, d_ff=32, N=1, block_size=16, batch_size=4,
                              max_steps=6, max_seconds=1e9, eval_every=3, warmup=1)
    data = {"tokenizer": gpt_training.Tokenizer("char", chars="abcdefgh"), "train": torch.randint(0, 8, (400,)),
            "held_out": torch.randint(0, 8, (100,)), "held_out_chars": 100}
    from solutions_lib.gpt.train import REFERENCE

    result = gpt_training.fit(cfg, REFERENCE, progress=False, log=lambda line: None, data=data)
    assert result["history"]["step"] == [3, 6]
    assert all(isinstance(x, float) and 1.0 < x < 4.0 for x in result["history"]["loss"]), result["history"]["loss"]
