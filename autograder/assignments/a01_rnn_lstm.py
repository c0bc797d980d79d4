"""Checks for notebook 01: recurrent networks (RNN, LSTM) and their limits."""
import torch
from torch import nn

import solutions_lib.rnn as ref
from autograder.checks.cases import Call, Case, Exercise
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


# ---------------------------------------------------------------- the exercises


EXERCISES = [
    Exercise("rnn_cell", ref.rnn_cell, points=1, cases=rnn_cell_cases),
    Exercise("rnn_forward", ref.rnn_forward, points=2, cases=rnn_forward_cases, depends_on=("rnn_cell",), returns=("outputs", "final hidden state")),
    Exercise("lstm_cell", ref.lstm_cell, points=2, cases=lstm_cell_cases, returns=("h", "c")),
    Exercise("lstm_forward", ref.lstm_forward, points=2, cases=lstm_forward_cases, depends_on=("lstm_cell",), returns=("outputs", "final (h, c)")),
    Exercise("gradient_norm_by_distance", ref.gradient_norm_by_distance, points=2, cases=gradient_cases),
    Exercise("SequenceClassifier", ref.SequenceClassifier, points=2, cases=classifier_cases, kind="module", parts={"RNN": 1, "LSTM": 1}),
]

DEMO_MISTAKES = [("rnn_forward", "not_carried"), ("lstm_cell", "forget_on_candidate")]
