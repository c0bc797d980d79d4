"""The GPT's fair held-out evaluation (course_lib.gpt_training.held_out_loss): every held-out token scored once,
each with a long context, checked against a brute-force evaluation that feeds the model one prefix per token."""
import math

import pytest
import torch

from course_lib.gpt_training import (Config, Tokenizer, fit, held_out_loss, scored_windows, token_losses)
from solutions_lib.gpt import GPT
from solutions_lib.gpt.data import evaluate
from solutions_lib.gpt.train import REFERENCE

TINY = dict(d_model=16, h=2, d_ff=32, N=2, block_size=12)


def tiny_gpt(V=11, seed=0, **sizes):
    torch.manual_seed(seed)
    model = GPT(V, **(TINY | sizes))
    with torch.no_grad():  # position embeddings far from equal, so that a token's loss depends on its context's length
        model.pos_embed.weight.normal_(0, 1.0)
    return model.eval()


def ids(n, V=11, seed=1):
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))


def brute_force(model, data, context):
    """-ln p(data[j] | the `context(j)` tokens before it), one forward pass per token, j = 1..n-1."""
    losses = []
    with torch.no_grad():
        for j in range(1, len(data)):
            x = data[j - context(j) : j]
            logits = model(x[None])[0][0, -1].double()
            losses.append(-logits.log_softmax(-1)[data[j]].item())
    return torch.tensor(losses, dtype=torch.float64)


def contexts(n, block_size, stride):
    """{j: the tokens target j reads}, from scored_windows: each target once, or KeyError/AssertionError."""
    read = {}
    for start, first in scored_windows(n, block_size, stride):
        L = min(block_size, n - 1 - start)
        assert 0 <= first < L, (start, first, L)
        for p in range(first, L):
            j = start + 1 + p
            assert j not in read, f"target {j} scored twice"
            read[j] = j - start
    return read


@pytest.mark.parametrize("n", [2, 5, 12, 13, 14, 40, 41, 100, 257])
@pytest.mark.parametrize("block_size, stride", [(12, None), (12, 1), (12, 5), (12, 6), (12, 12), (1, None), (2, 1), (64, 32)])
def test_every_target_is_scored_exactly_once_with_a_long_context(n, block_size, stride):
    read = contexts(n, block_size, stride)
    assert sorted(read) == list(range(1, n))  # every target, once (contexts() fails on a second time)
    s = stride or max(block_size // 2, 1)
    for j, c in read.items():
        assert c <= min(j, block_size)  # a window never holds more than block_size inputs
        # all the context there is in the first block, at least block_size - stride + 1 tokens after it
        assert c >= min(j, block_size - s + 1), (j, c)
    if stride == 1:
        assert read == {j: min(j, block_size) for j in range(1, n)}  # the full available context, every time


def test_a_stride_outside_the_block_or_a_stream_without_targets_is_refused():
    for stride in (0, 13):
        with pytest.raises(ValueError, match="stride"):
            scored_windows(40, 12, stride)
    with pytest.raises(ValueError, match="no target"):
        scored_windows(1, 12)


@pytest.mark.parametrize("n", [5, 13, 41, 60])
def test_with_a_stride_of_one_every_token_gets_its_full_context_as_brute_force_computes_it(n):
    model, data = tiny_gpt(), ids(n, seed=n)
    expected = brute_force(model, data, lambda j: min(j, 12))
    for batch_size in (1, 3, 64):  # however the windows are batched
        got = token_losses(model, data, 12, stride=1, batch_size=batch_size)
        assert got.shape == (n - 1,) and got.dtype == torch.float64
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("stride", [None, 4, 12])
def test_any_stride_scores_each_token_from_the_context_its_window_gives(stride):
    model, data = tiny_gpt(), ids(57, seed=3)
    read = contexts(57, 12, stride)
    got = token_losses(model, data, 12, stride=stride, batch_size=4)
    torch.testing.assert_close(got, brute_force(model, data, read.__getitem__), rtol=0, atol=1e-5)


def test_the_default_is_half_a_block_and_its_loss_is_the_mean_over_every_target():
    model, data = tiny_gpt(), ids(90, seed=4)
    loss, n_tokens = held_out_loss(model, data, 12)
    expected = brute_force(model, data, contexts(90, 12, 6).__getitem__)
    assert n_tokens == 89 and loss == pytest.approx(expected.mean().item(), abs=1e-6)
    assert loss == pytest.approx(held_out_loss(model, data, 12, stride=6)[0], abs=1e-12)
    assert evaluate(model, data, 12, n_chars=200) == pytest.approx(expected.sum().item() / 200, abs=1e-5)


def test_the_context_matters_here_so_the_fair_figure_differs_from_windows_side_by_side():
    # the tiny model's random positions make a token's loss depend on where it sits in its window: the test above
    # would not tell a stride from another on a model that ignored positions
    model, data = tiny_gpt(), ids(200, seed=5)
    side_by_side, fair, full = (held_out_loss(model, data, 12, stride=s)[0] for s in (12, None, 1))
    assert abs(side_by_side - fair) > 1e-3 and abs(full - fair) > 1e-4


def test_leaves_the_model_in_its_mode_and_reads_data_on_any_device():
    model, data = tiny_gpt().train(), ids(30)
    held_out_loss(model, data, 12)
    assert model.training
    model.eval()
    held_out_loss(model, data, 12)
    assert not model.training


def test_the_training_command_scores_the_held_out_text_with_it():
    text = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 8
    cut = int(0.9 * len(text))
    tokenizer = Tokenizer("char", chars="".join(sorted(set(text))))
    data = {"tokenizer": tokenizer, "train": torch.tensor(tokenizer.encode(text[:cut])),
            "held_out": torch.tensor(tokenizer.encode(text[cut:])), "held_out_chars": len(text) - cut}
    cfg = Config(tokenizer="char", d_model=16, h=2, d_ff=32, N=1, block_size=16, batch_size=4, max_steps=3, max_seconds=0,
                 warmup=1, bf16=False)
    result = fit(cfg, REFERENCE, progress=False, log=lambda line: None, data=data)
    loss, n_tokens = held_out_loss(result["model"], data["held_out"], 16)
    assert n_tokens == len(data["held_out"]) - 1
    assert result["held_out"] == pytest.approx(loss * n_tokens / data["held_out_chars"], abs=1e-6)
    assert math.isfinite(result["held_out"])
