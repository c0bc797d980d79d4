"""Checks for notebook 01: recurrent networks (RNN, LSTM) and their limits."""
import torch
from torch import nn

import solutions_lib.rnn as ref
from autograder.core import Call, Case, Exercise, Mistake
from autograder.inputs import Draw, dims
from autograder.mutants import swap

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


# ---------------------------------------------------------------- rnn_cell, rnn_forward, lstm_cell, lstm_forward


RNN, LSTM = 1, 4  # how many gates the weights stack


def _case(seed, gates, sizes, dtype=torch.float32, hidden=False):
    """sizes: (B, d_in, d_h) for one step, x: (B, d_in); (B, T, d_in, d_h) for a sequence, x: (B, T, d_in).
    The call: x, the initial state (h0 for an RNN, (h0, c0) for an LSTM), the weights."""
    B, *T, d_in, d_h = sizes  # T: [] for one step, [T] for a sequence

    def make():
        r = Draw(seed)
        x, h0 = r.randn(B, *T, d_in, dtype=dtype), r.randn(B, d_h, dtype=dtype)
        state = h0 if gates == RNN else (h0, r.randn(B, d_h, dtype=dtype))
        return Call((x, state, *_weights(r, d_in, d_h, gates, dtype)))

    named = dict(B=B) | (dict(T=T[0]) if T else {}) | dict(d_in=d_in, d_h=d_h)
    return Case(dims(**named) + _dtype_label(dtype), make, hidden=hidden)


# The options of each case in order: rnn_cell and lstm_cell share theirs, rnn_forward and lstm_forward theirs.
F64, HIDDEN = dict(dtype=torch.float64), dict(hidden=True)
STEP_OPTIONS = [{}, {}, F64, HIDDEN, F64 | HIDDEN]
SEQUENCE_OPTIONS = [{}, {}, F64, HIDDEN]


def _cases(first_seed, gates, sizes, options):
    """One case for each sizes, with the options of the same rank, the seeds counting up from first_seed."""
    return [_case(first_seed + i, gates, s, **o) for i, (s, o) in enumerate(zip(sizes, options, strict=True))]


def rnn_cell_cases():  # sizes: B, d_in, d_h
    return _cases(101, RNN, [(2, 3, 4), (1, 5, 5), (3, 4, 4), (4, 6, 3), (2, 7, 7)], STEP_OPTIONS)


def rnn_forward_cases():  # sizes: B, T, d_in, d_h
    return _cases(111, RNN, [(2, 5, 3, 4), (1, 1, 4, 4), (3, 7, 2, 5), (4, 9, 5, 6)], SEQUENCE_OPTIONS)


def lstm_cell_cases():
    return _cases(121, LSTM, [(2, 3, 4), (1, 5, 5), (3, 4, 2), (4, 6, 3), (2, 2, 6)], STEP_OPTIONS)


def lstm_forward_cases():
    return _cases(131, LSTM, [(2, 5, 3, 4), (1, 3, 4, 4), (3, 6, 2, 5), (4, 8, 5, 3)], SEQUENCE_OPTIONS)


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
        _gradient_case(141, "rnn", 2, 6, 3, 4), _gradient_case(142, "lstm", 3, 5, 2, 6),
        _gradient_case(143, "rnn", 4, 8, 5, 5, dtype=torch.float64),
        _gradient_case(144, "lstm", 2, 12, 4, 8, dtype=torch.float64, hidden=True),
    ]


# ---------------------------------------------------------------- SequenceClassifier


def _classifier_case(seed, cell, B, T, vocab_size, d_emb, d_h, n_classes, hidden=False):
    def make():
        r = Draw(seed)
        return Call((r.integers(0, vocab_size, B, T),), init=(vocab_size, d_emb, d_h, n_classes, cell))

    label = f"cell={cell!r}, " + dims(B=B, T=T, vocab_size=vocab_size, d_emb=d_emb, d_h=d_h, n_classes=n_classes)
    return Case(label, make, part=cell.upper(), hidden=hidden)


def classifier_cases():
    return [
        _classifier_case(151, "rnn", 2, 5, 10, 4, 6, 2), _classifier_case(152, "lstm", 3, 4, 7, 3, 5, 3),
        _classifier_case(153, "lstm", 1, 6, 12, 5, 4, 2), _classifier_case(154, "rnn", 4, 7, 9, 6, 8, 4, hidden=True),
        _classifier_case(155, "lstm", 4, 9, 11, 4, 6, 2, hidden=True),
    ]


# ---------------------------------------------------------------- the catalog

NOT_CARRIED = "the hidden state is not carried from one step to the next: each step must start from the h it computed at the step before."
NO_TANH = "you left out the tanh: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)."
PRE = "x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh"  # rnn_cell's pre-activation
STEP = "rnn_cell(x[:, t], h_t, W_ih, W_hh, b_ih, b_hh)"
LSTM_STEP = "lstm_cell(x[:, t], state,"

EXERCISES = [
    Exercise("rnn_cell", ref.rnn_cell, points=1, cases=rnn_cell_cases, mistakes=[
        Mistake("no_tanh", NO_TANH, swap(f"torch.tanh({PRE})", PRE)),
        Mistake("swapped", "you swapped the weights: W_ih multiplies the input x_t and W_hh the previous hidden state h_{t-1}.", swap(PRE, "x_t @ W_hh.T + b_ih + h_prev @ W_ih.T + b_hh")),
        Mistake("not_transposed", "the weights are stored as (d_h, d_in), as in nn.RNN, so multiply by their transpose: x_t @ W_ih.T.", swap(".T", "", every=True)),
        Mistake("one_bias", "you left out b_hh; PyTorch's RNN adds both biases, b_ih and b_hh.", swap(" + h_prev @ W_hh.T + b_hh", " + h_prev @ W_hh.T")),
        Mistake("relu", "you used ReLU; the course's RNN, like nn.RNN's default, uses tanh.", swap("torch.tanh", "torch.relu")),
    ]),
    Exercise("rnn_forward", ref.rnn_forward, points=2, cases=rnn_forward_cases, depends_on=("rnn_cell",), returns=("outputs", "final hidden state"), mistakes=[
        Mistake("not_carried", NOT_CARRIED, swap(STEP, "rnn_cell(x[:, t], h0, W_ih, W_hh, b_ih, b_hh)")),
        Mistake("time_major", "you stacked the outputs along a new first axis, giving (T, B, d_h); stack along dim=1 for batch-first (B, T, d_h).", swap("torch.stack(outputs, dim=1)", "torch.stack(outputs)")),
        Mistake("no_tanh", NO_TANH, swap(STEP, "x[:, t] @ W_ih.T + b_ih + h_t @ W_hh.T + b_hh")),
        Mistake("ignores_h0", "you started from zeros instead of the given initial state h0.", swap("h_t = h0", "h_t = torch.zeros_like(h0)")),
    ]),
    Exercise("lstm_cell", ref.lstm_cell, points=2, cases=lstm_cell_cases, returns=("h", "c"), mistakes=[
        Mistake("forget_on_candidate", "you applied the forget gate to the candidate and the input gate to the old cell; c_t = f * c_{t-1} + i * g.", swap("f * c_prev + i * g", "i * c_prev + f * g")),
        Mistake("output_before_tanh", "you applied the output gate before the tanh; h_t = o * tanh(c_t), not tanh(o * c_t).", swap("o * torch.tanh(c_t)", "torch.tanh(o * c_t)")),
        Mistake("gate_order", "PyTorch stacks the gates in the order input, forget, candidate (g), output; you read them in another order.", swap("i, f, g, o = z.chunk", "i, f, o, g = z.chunk")),
        Mistake("no_tanh_on_cell", "you left out the tanh of the cell state: h_t = o * tanh(c_t).", swap("o * torch.tanh(c_t)", "o * c_t")),
        Mistake("sigmoid_candidate", "the candidate g goes through tanh (values in -1..1), not sigmoid; only the three gates use sigmoid.", swap("torch.tanh(g)", "torch.sigmoid(g)")),
    ]),
    Exercise("lstm_forward", ref.lstm_forward, points=2, cases=lstm_forward_cases, depends_on=("lstm_cell",), returns=("outputs", "final (h, c)"), mistakes=[
        Mistake("cell_not_carried", "the cell state c is not carried from one step to the next: each step must start from the c it computed at the step before.", swap(LSTM_STEP, "lstm_cell(x[:, t], (state[0], state0[1]),")),
        Mistake("hidden_not_carried", NOT_CARRIED, swap(LSTM_STEP, "lstm_cell(x[:, t], (state0[0], state[1]),")),
        Mistake("outputs_are_cells", "the outputs are the hidden states h_t, not the cell states c_t.", swap("outputs.append(state[0])", "outputs.append(state[1])")),
        Mistake("state_swapped", "return the final state as (h_T, c_T), in that order, as nn.LSTM does.", swap("dim=1), state", "dim=1), (state[1], state[0])")),
    ]),
    Exercise("gradient_norm_by_distance", ref.gradient_norm_by_distance, points=2, cases=gradient_cases, mistakes=[
        Mistake("not_flipped", "your norms are in position order; entry d must be the input d steps before the end, so flip the time axis.", swap(".flip(0)", "")),
        Mistake("all_outputs", "you backpropagated from the sum of every output; take only the last output, outputs[:, -1].", swap("grad(outputs[:, -1].sum()", "grad(outputs.sum()")),
        Mistake("summed_over_batch", "you summed the norms over the batch; average them (mean over dim 0).", swap(".mean(dim=0)", ".sum(dim=0)")),
        Mistake("squared_norm", "you returned the squared norm; take the Euclidean norm, grad.norm(dim=-1).", swap("grad.norm(dim=-1)", "(grad**2).sum(dim=-1)")),
    ]),
    Exercise("SequenceClassifier", ref.SequenceClassifier, points=2, cases=classifier_cases, kind="module", parts={"RNN": 1, "LSTM": 1}, mistakes=[
        Mistake("first_step", "you classified from the first step's output; the last one, outputs[:, -1], is the one that has read the whole sentence.", swap("outputs[:, -1]", "outputs[:, 0]")),
        Mistake("mean_over_time", "you averaged the outputs over time; classify from the last step's output, outputs[:, -1].", swap("outputs[:, -1]", "outputs.mean(dim=1)")),
        Mistake("not_batch_first", "your recurrent layer is not batch_first, so it reads the batch axis as time; pass batch_first=True.", swap("recurrent(d_emb, d_h, batch_first=True)", "recurrent(d_emb, d_h)")),
        Mistake("cell_state", "an LSTM's final state is (h, c); classify from the hidden state h, not the cell state c.", swap("outputs, _ = self.rnn", "outputs, state = self.rnn") & swap("outputs[:, -1]", "state[1][0] if isinstance(state, tuple) else state[0]")),
    ]),
]

DEMO_MISTAKES = [("rnn_forward", "not_carried"), ("lstm_cell", "forget_on_candidate")]
