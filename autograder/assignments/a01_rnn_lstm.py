"""Checks for notebook 01: recurrent networks (RNN, LSTM) and their limits.

Each known mistake is a complete wrong implementation, written as a learner
would write it, self-contained (only torch, math, nn, F), so that it can be
pasted into a notebook and graded on its own.
"""
import torch
from torch import nn

import solutions_lib.rnn as ref
from autograder.core import Call, Case, Exercise, Mistake
from autograder.inputs import Draw, dims

NOTEBOOK = "01_rnn_lstm"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


def _weights(r, d_in, d_h, gates, dtype):
    """W_ih, W_hh, b_ih, b_hh in PyTorch's layout, scaled like PyTorch's init."""
    s = d_h**-0.5
    return (
        s * r.randn(gates * d_h, d_in, dtype=dtype),
        s * r.randn(gates * d_h, d_h, dtype=dtype),
        s * r.randn(gates * d_h, dtype=dtype),
        s * r.randn(gates * d_h, dtype=dtype),
    )


# ---------------------------------------------------------------- rnn_cell


def _rnn_cell_case(seed, B, d_in, d_h, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        x_t, h_prev = r.randn(B, d_in, dtype=dtype), r.randn(B, d_h, dtype=dtype)
        return Call((x_t, h_prev, *_weights(r, d_in, d_h, 1, dtype)))

    return Case(dims(B=B, d_in=d_in, d_h=d_h) + _dtype_label(dtype), make, hidden=hidden)


def rnn_cell_cases():
    return [
        _rnn_cell_case(101, 2, 3, 4),
        _rnn_cell_case(102, 1, 5, 5),
        _rnn_cell_case(103, 3, 4, 4, dtype=torch.float64),
        _rnn_cell_case(104, 4, 6, 3, hidden=True),
        _rnn_cell_case(105, 2, 7, 7, dtype=torch.float64, hidden=True),
    ]


def rnn_cell_no_tanh(x_t, h_prev, W_ih, W_hh, b_ih, b_hh):
    return x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh


def rnn_cell_swapped(x_t, h_prev, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(x_t @ W_hh.T + b_ih + h_prev @ W_ih.T + b_hh)


def rnn_cell_not_transposed(x_t, h_prev, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(x_t @ W_ih + b_ih + h_prev @ W_hh + b_hh)


def rnn_cell_one_bias(x_t, h_prev, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(x_t @ W_ih.T + b_ih + h_prev @ W_hh.T)


def rnn_cell_relu(x_t, h_prev, W_ih, W_hh, b_ih, b_hh):
    return torch.relu(x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh)


# ---------------------------------------------------------------- rnn_forward


def _rnn_forward_case(seed, B, T, d_in, d_h, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        x, h0 = r.randn(B, T, d_in, dtype=dtype), r.randn(B, d_h, dtype=dtype)
        return Call((x, h0, *_weights(r, d_in, d_h, 1, dtype)))

    return Case(dims(B=B, T=T, d_in=d_in, d_h=d_h) + _dtype_label(dtype), make, hidden=hidden)


def rnn_forward_cases():
    return [
        _rnn_forward_case(111, 2, 5, 3, 4),
        _rnn_forward_case(112, 1, 1, 4, 4),
        _rnn_forward_case(113, 3, 7, 2, 5, dtype=torch.float64),
        _rnn_forward_case(114, 4, 9, 5, 6, hidden=True),
    ]


def rnn_forward_not_carried(x, h0, W_ih, W_hh, b_ih, b_hh):
    outputs = []
    for t in range(x.size(1)):
        h = torch.tanh(x[:, t] @ W_ih.T + b_ih + h0 @ W_hh.T + b_hh)
        outputs.append(h)
    return torch.stack(outputs, dim=1), h


def rnn_forward_time_major(x, h0, W_ih, W_hh, b_ih, b_hh):
    h = h0
    outputs = []
    for t in range(x.size(1)):
        h = torch.tanh(x[:, t] @ W_ih.T + b_ih + h @ W_hh.T + b_hh)
        outputs.append(h)
    return torch.stack(outputs), h


def rnn_forward_no_tanh(x, h0, W_ih, W_hh, b_ih, b_hh):
    h = h0
    outputs = []
    for t in range(x.size(1)):
        h = x[:, t] @ W_ih.T + b_ih + h @ W_hh.T + b_hh
        outputs.append(h)
    return torch.stack(outputs, dim=1), h


def rnn_forward_ignores_h0(x, h0, W_ih, W_hh, b_ih, b_hh):
    h = torch.zeros_like(h0)
    outputs = []
    for t in range(x.size(1)):
        h = torch.tanh(x[:, t] @ W_ih.T + b_ih + h @ W_hh.T + b_hh)
        outputs.append(h)
    return torch.stack(outputs, dim=1), h


# ---------------------------------------------------------------- lstm_cell


def _lstm_cell_case(seed, B, d_in, d_h, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        x_t, h_prev, c_prev = r.randn(B, d_in, dtype=dtype), r.randn(B, d_h, dtype=dtype), r.randn(B, d_h, dtype=dtype)
        return Call((x_t, (h_prev, c_prev), *_weights(r, d_in, d_h, 4, dtype)))

    return Case(dims(B=B, d_in=d_in, d_h=d_h) + _dtype_label(dtype), make, hidden=hidden)


def lstm_cell_cases():
    return [
        _lstm_cell_case(121, 2, 3, 4),
        _lstm_cell_case(122, 1, 5, 5),
        _lstm_cell_case(123, 3, 4, 2, dtype=torch.float64),
        _lstm_cell_case(124, 4, 6, 3, hidden=True),
        _lstm_cell_case(125, 2, 2, 6, dtype=torch.float64, hidden=True),
    ]


def lstm_cell_forget_on_candidate(x_t, state, W_ih, W_hh, b_ih, b_hh):
    h_prev, c_prev = state
    i, f, g, o = (x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh).chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c = i * c_prev + f * g
    return o * torch.tanh(c), c


def lstm_cell_output_before_tanh(x_t, state, W_ih, W_hh, b_ih, b_hh):
    h_prev, c_prev = state
    i, f, g, o = (x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh).chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c = f * c_prev + i * g
    return torch.tanh(o * c), c


def lstm_cell_gate_order_ifog(x_t, state, W_ih, W_hh, b_ih, b_hh):
    h_prev, c_prev = state
    i, f, o, g = (x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh).chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c = f * c_prev + i * g
    return o * torch.tanh(c), c


def lstm_cell_no_tanh_on_cell(x_t, state, W_ih, W_hh, b_ih, b_hh):
    h_prev, c_prev = state
    i, f, g, o = (x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh).chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c = f * c_prev + i * g
    return o * c, c


def lstm_cell_sigmoid_candidate(x_t, state, W_ih, W_hh, b_ih, b_hh):
    h_prev, c_prev = state
    i, f, g, o = (x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh).chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(g), torch.sigmoid(o)
    c = f * c_prev + i * g
    return o * torch.tanh(c), c


# ---------------------------------------------------------------- lstm_forward


def _lstm_forward_case(seed, B, T, d_in, d_h, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        x, h0, c0 = r.randn(B, T, d_in, dtype=dtype), r.randn(B, d_h, dtype=dtype), r.randn(B, d_h, dtype=dtype)
        return Call((x, (h0, c0), *_weights(r, d_in, d_h, 4, dtype)))

    return Case(dims(B=B, T=T, d_in=d_in, d_h=d_h) + _dtype_label(dtype), make, hidden=hidden)


def lstm_forward_cases():
    return [
        _lstm_forward_case(131, 2, 5, 3, 4),
        _lstm_forward_case(132, 1, 3, 4, 4),
        _lstm_forward_case(133, 3, 6, 2, 5, dtype=torch.float64),
        _lstm_forward_case(134, 4, 8, 5, 3, hidden=True),
    ]


def lstm_forward_cell_not_carried(x, state0, W_ih, W_hh, b_ih, b_hh):
    h, c0 = state0
    outputs = []
    for t in range(x.size(1)):
        i, f, g, o = (x[:, t] @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c0 + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1), (h, c)


def lstm_forward_hidden_not_carried(x, state0, W_ih, W_hh, b_ih, b_hh):
    h0, c = state0
    outputs = []
    for t in range(x.size(1)):
        i, f, g, o = (x[:, t] @ W_ih.T + b_ih + h0 @ W_hh.T + b_hh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1), (h, c)


def lstm_forward_outputs_are_cells(x, state0, W_ih, W_hh, b_ih, b_hh):
    h, c = state0
    outputs = []
    for t in range(x.size(1)):
        i, f, g, o = (x[:, t] @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(c)
    return torch.stack(outputs, dim=1), (h, c)


def lstm_forward_state_swapped(x, state0, W_ih, W_hh, b_ih, b_hh):
    h, c = state0
    outputs = []
    for t in range(x.size(1)):
        i, f, g, o = (x[:, t] @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1), (c, h)


# ---------------------------------------------------------------- gradient_norm_by_distance


def _gradient_case(seed, cell, B, T, d_in, d_h, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        model = (nn.RNN if cell == "rnn" else nn.LSTM)(d_in, d_h, batch_first=True).to(dtype)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(d_h**-0.5 * r.randn(*p.shape, dtype=dtype))
        return Call((model, r.randn(B, T, d_in, dtype=dtype)))

    label = f"nn.{cell.upper()}, " + dims(B=B, T=T, d_in=d_in, d_h=d_h) + _dtype_label(dtype)
    return Case(label, make, hidden=hidden, grad=False)


def gradient_cases():
    return [
        _gradient_case(141, "rnn", 2, 6, 3, 4),
        _gradient_case(142, "lstm", 3, 5, 2, 6),
        _gradient_case(143, "rnn", 4, 8, 5, 5, dtype=torch.float64),
        _gradient_case(144, "lstm", 2, 12, 4, 8, dtype=torch.float64, hidden=True),
    ]


def gradient_not_flipped(model, x):
    x = x.detach().requires_grad_(True)
    outputs, _ = model(x)
    (grad,) = torch.autograd.grad(outputs[:, -1].sum(), x)
    return grad.norm(dim=-1).mean(dim=0)


def gradient_all_outputs(model, x):
    x = x.detach().requires_grad_(True)
    outputs, _ = model(x)
    (grad,) = torch.autograd.grad(outputs.sum(), x)
    return grad.norm(dim=-1).mean(dim=0).flip(0)


def gradient_summed_over_batch(model, x):
    x = x.detach().requires_grad_(True)
    outputs, _ = model(x)
    (grad,) = torch.autograd.grad(outputs[:, -1].sum(), x)
    return grad.norm(dim=-1).sum(dim=0).flip(0)


def gradient_squared_norm(model, x):
    x = x.detach().requires_grad_(True)
    outputs, _ = model(x)
    (grad,) = torch.autograd.grad(outputs[:, -1].sum(), x)
    return (grad**2).sum(dim=-1).mean(dim=0).flip(0)


# ---------------------------------------------------------------- SequenceClassifier


def _classifier_case(seed, cell, B, T, vocab_size, d_emb, d_h, n_classes, hidden=False):
    def make():
        r = Draw(seed)
        return Call((r.integers(0, vocab_size, B, T),), init=(vocab_size, d_emb, d_h, n_classes, cell))

    label = f"cell={cell!r}, " + dims(B=B, T=T, vocab_size=vocab_size, d_emb=d_emb, d_h=d_h, n_classes=n_classes)
    return Case(label, make, part=cell.upper(), hidden=hidden)


def classifier_cases():
    return [
        _classifier_case(151, "rnn", 2, 5, 10, 4, 6, 2),
        _classifier_case(152, "lstm", 3, 4, 7, 3, 5, 3),
        _classifier_case(153, "lstm", 1, 6, 12, 5, 4, 2),
        _classifier_case(154, "rnn", 4, 7, 9, 6, 8, 4, hidden=True),
        _classifier_case(155, "lstm", 4, 9, 11, 4, 6, 2, hidden=True),
    ]


class ClassifierFirstStep(nn.Module):
    def __init__(self, vocab_size, d_emb, d_h, n_classes, cell="lstm"):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_emb)
        self.rnn = (nn.RNN if cell == "rnn" else nn.LSTM)(d_emb, d_h, batch_first=True)
        self.head = nn.Linear(d_h, n_classes)

    def forward(self, tokens):
        outputs, _ = self.rnn(self.embed(tokens))
        return self.head(outputs[:, 0])


class ClassifierMeanOverTime(nn.Module):
    def __init__(self, vocab_size, d_emb, d_h, n_classes, cell="lstm"):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_emb)
        self.rnn = (nn.RNN if cell == "rnn" else nn.LSTM)(d_emb, d_h, batch_first=True)
        self.head = nn.Linear(d_h, n_classes)

    def forward(self, tokens):
        outputs, _ = self.rnn(self.embed(tokens))
        return self.head(outputs.mean(dim=1))


class ClassifierNotBatchFirst(nn.Module):
    def __init__(self, vocab_size, d_emb, d_h, n_classes, cell="lstm"):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_emb)
        self.rnn = (nn.RNN if cell == "rnn" else nn.LSTM)(d_emb, d_h)
        self.head = nn.Linear(d_h, n_classes)

    def forward(self, tokens):
        outputs, _ = self.rnn(self.embed(tokens))
        return self.head(outputs[:, -1])


class ClassifierFromCellState(nn.Module):
    def __init__(self, vocab_size, d_emb, d_h, n_classes, cell="lstm"):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_emb)
        self.rnn = (nn.RNN if cell == "rnn" else nn.LSTM)(d_emb, d_h, batch_first=True)
        self.head = nn.Linear(d_h, n_classes)

    def forward(self, tokens):
        _, state = self.rnn(self.embed(tokens))
        last = state[1][0] if isinstance(state, tuple) else state[0]
        return self.head(last)


# ---------------------------------------------------------------- the catalog

NOT_CARRIED = "the hidden state is not carried from one step to the next: each step must start from the h it computed at the step before."

EXERCISES = [
    Exercise(
        "rnn_cell",
        ref.rnn_cell,
        points=1,
        cases=rnn_cell_cases,
        mistakes=[
            Mistake("no_tanh", "you left out the tanh: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh).", rnn_cell_no_tanh),
            Mistake("swapped", "you swapped the weights: W_ih multiplies the input x_t and W_hh the previous hidden state h_{t-1}.", rnn_cell_swapped),
            Mistake("not_transposed", "the weights are stored as (d_h, d_in), as in nn.RNN, so multiply by their transpose: x_t @ W_ih.T.", rnn_cell_not_transposed),
            Mistake("one_bias", "you left out b_hh; PyTorch's RNN adds both biases, b_ih and b_hh.", rnn_cell_one_bias),
            Mistake("relu", "you used ReLU; the course's RNN, like nn.RNN's default, uses tanh.", rnn_cell_relu),
        ],
    ),
    Exercise(
        "rnn_forward",
        ref.rnn_forward,
        points=2,
        cases=rnn_forward_cases,
        depends_on=("rnn_cell",),
        returns=("outputs", "final hidden state"),
        mistakes=[
            Mistake("not_carried", NOT_CARRIED, rnn_forward_not_carried),
            Mistake("time_major", "you stacked the outputs along a new first axis, giving (T, B, d_h); stack along dim=1 for batch-first (B, T, d_h).", rnn_forward_time_major),
            Mistake("no_tanh", "you left out the tanh: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh).", rnn_forward_no_tanh),
            Mistake("ignores_h0", "you started from zeros instead of the given initial state h0.", rnn_forward_ignores_h0),
        ],
    ),
    Exercise(
        "lstm_cell",
        ref.lstm_cell,
        points=2,
        cases=lstm_cell_cases,
        returns=("h", "c"),
        mistakes=[
            Mistake("forget_on_candidate", "you applied the forget gate to the candidate and the input gate to the old cell; c_t = f * c_{t-1} + i * g.", lstm_cell_forget_on_candidate),
            Mistake("output_before_tanh", "you applied the output gate before the tanh; h_t = o * tanh(c_t), not tanh(o * c_t).", lstm_cell_output_before_tanh),
            Mistake("gate_order", "PyTorch stacks the gates in the order input, forget, candidate (g), output; you read them in another order.", lstm_cell_gate_order_ifog),
            Mistake("no_tanh_on_cell", "you left out the tanh of the cell state: h_t = o * tanh(c_t).", lstm_cell_no_tanh_on_cell),
            Mistake("sigmoid_candidate", "the candidate g goes through tanh (values in -1..1), not sigmoid; only the three gates use sigmoid.", lstm_cell_sigmoid_candidate),
        ],
    ),
    Exercise(
        "lstm_forward",
        ref.lstm_forward,
        points=2,
        cases=lstm_forward_cases,
        depends_on=("lstm_cell",),
        returns=("outputs", "final (h, c)"),
        mistakes=[
            Mistake("cell_not_carried", "the cell state c is not carried from one step to the next: each step must start from the c it computed at the step before.", lstm_forward_cell_not_carried),
            Mistake("hidden_not_carried", NOT_CARRIED, lstm_forward_hidden_not_carried),
            Mistake("outputs_are_cells", "the outputs are the hidden states h_t, not the cell states c_t.", lstm_forward_outputs_are_cells),
            Mistake("state_swapped", "return the final state as (h_T, c_T), in that order, as nn.LSTM does.", lstm_forward_state_swapped),
        ],
    ),
    Exercise(
        "gradient_norm_by_distance",
        ref.gradient_norm_by_distance,
        points=2,
        cases=gradient_cases,
        mistakes=[
            Mistake("not_flipped", "your norms are in position order; entry d must be the input d steps before the end, so flip the time axis.", gradient_not_flipped),
            Mistake("all_outputs", "you backpropagated from the sum of every output; take only the last output, outputs[:, -1].", gradient_all_outputs),
            Mistake("summed_over_batch", "you summed the norms over the batch; average them (mean over dim 0).", gradient_summed_over_batch),
            Mistake("squared_norm", "you returned the squared norm; take the Euclidean norm, grad.norm(dim=-1).", gradient_squared_norm),
        ],
    ),
    Exercise(
        "SequenceClassifier",
        ref.SequenceClassifier,
        points=2,
        cases=classifier_cases,
        kind="module",
        parts={"RNN": 1, "LSTM": 1},
        mistakes=[
            Mistake("first_step", "you classified from the first step's output; the last one, outputs[:, -1], is the one that has read the whole sentence.", ClassifierFirstStep),
            Mistake("mean_over_time", "you averaged the outputs over time; classify from the last step's output, outputs[:, -1].", ClassifierMeanOverTime),
            Mistake("not_batch_first", "your recurrent layer is not batch_first, so it reads the batch axis as time; pass batch_first=True.", ClassifierNotBatchFirst),
            Mistake("cell_state", "an LSTM's final state is (h, c); classify from the hidden state h, not the cell state c.", ClassifierFromCellState),
        ],
    ),
]

DEMO_MISTAKES = [("rnn_forward", "not_carried"), ("lstm_cell", "forget_on_candidate")]
