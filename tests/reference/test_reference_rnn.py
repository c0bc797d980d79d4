"""solutions_lib's RNN and LSTM against nn.RNN and nn.LSTM loaded with the same weights."""
import pytest
import torch
from torch import nn

from solutions_lib import rnn as ref

SIZES = [(1, 1, 3, 4), (2, 5, 3, 3), (3, 7, 6, 2), (4, 12, 5, 8)]  # B, T, d_in, d_h


def draw(B, T, d_in, d_h, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, d_in, generator=g, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(B, d_h, generator=g, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(B, d_h, generator=g, dtype=torch.float64, requires_grad=True)
    return x, h0, c0


def weights(module):
    return module.weight_ih_l0, module.weight_hh_l0, module.bias_ih_l0, module.bias_hh_l0


def grads(outputs, inputs):
    loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape)).sum() for o in outputs)
    return torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("size", SIZES, ids=str)
def test_rnn_forward_matches_nn_rnn(size):
    B, T, d_in, d_h = size
    x, h0, _ = draw(*size)
    torch.manual_seed(1)
    rnn = nn.RNN(d_in, d_h, batch_first=True).double()
    ours, h_T = ref.rnn_forward(x, h0, *weights(rnn))
    theirs, h_n = rnn(x, h0.unsqueeze(0))
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(h_T, h_n[0])
    inputs = (x, h0, *rnn.parameters())
    for a, b in zip(grads((ours, h_T), inputs), grads((theirs, h_n[0]), inputs)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("size", SIZES, ids=str)
def test_rnn_cell_matches_nn_rnn_cell(size):
    B, _, d_in, d_h = size
    x, h0, _ = draw(*size, seed=2)
    cell = nn.RNNCell(d_in, d_h).double()
    ours = ref.rnn_cell(x[:, 0], h0, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    theirs = cell(x[:, 0], h0)
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(grads((ours,), (x, h0)), grads((theirs,), (x, h0))):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("size", SIZES, ids=str)
def test_lstm_cell_matches_nn_lstm_cell(size):
    B, _, d_in, d_h = size
    x, h0, c0 = draw(*size, seed=3)
    cell = nn.LSTMCell(d_in, d_h).double()
    ours = ref.lstm_cell(x[:, 0], (h0, c0), cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    theirs = cell(x[:, 0], (h0, c0))
    inputs = (x, h0, c0, *cell.parameters())
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)
    for a, b in zip(grads(ours, inputs), grads(theirs, inputs)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("size", SIZES, ids=str)
def test_lstm_forward_matches_nn_lstm(size):
    x, h0, c0 = draw(*size, seed=4)
    torch.manual_seed(5)
    lstm = nn.LSTM(size[2], size[3], batch_first=True).double()
    ours, (h_T, c_T) = ref.lstm_forward(x, (h0, c0), *weights(lstm))
    theirs, (h_n, c_n) = lstm(x, (h0.unsqueeze(0), c0.unsqueeze(0)))
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(h_T, h_n[0])
    torch.testing.assert_close(c_T, c_n[0])
    inputs = (x, h0, c0, *lstm.parameters())
    for a, b in zip(grads((ours, h_T, c_T), inputs), grads((theirs, h_n[0], c_n[0]), inputs)):
        torch.testing.assert_close(a, b)


def test_gradient_norm_by_distance_matches_a_direct_jacobian():
    torch.manual_seed(6)
    rnn = nn.RNN(3, 4, batch_first=True).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    norms = ref.gradient_norm_by_distance(rnn, x)
    for d in range(5):
        t = 4 - d
        per_sample = []
        for b in range(2):
            xb = x[b : b + 1].clone().requires_grad_(True)
            (g,) = torch.autograd.grad(rnn(xb)[0][0, -1].sum(), xb)
            per_sample.append(g[0, t].norm())
        torch.testing.assert_close(norms[d], torch.stack(per_sample).mean())


def test_sequence_classifier_uses_the_last_step_and_the_task_is_well_formed():
    from course_lib import tasks

    tokens, labels = tasks.long_range_batch(8, 6, torch.Generator().manual_seed(0))
    assert tokens.shape == (8, 11) and labels.shape == (8,)
    keyword = [tasks.LONG_RANGE_VOCAB[i] for i in tokens[:, 3].tolist()]
    assert [tasks.KEYWORDS[k] for k in keyword] == [tasks.ANSWERS[y] for y in labels.tolist()]
    model = ref.SequenceClassifier(len(tasks.LONG_RANGE_VOCAB), 4, 5, 2, cell="rnn")
    outputs, _ = model.rnn(model.embed(tokens))
    torch.testing.assert_close(model(tokens), model.head(outputs[:, -1]))
