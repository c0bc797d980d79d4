"""Recurrent networks from scratch (notebook 01): the RNN and the LSTM.

The weights use PyTorch's layout, so that nn.RNN and nn.LSTM can be loaded
with the same numbers:

    RNN:   h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)
           W_ih: (d_h, d_in), W_hh: (d_h, d_h), b_ih, b_hh: (d_h,)
    LSTM:  the four gates are stacked in PyTorch's order i, f, g, o
           W_ih: (4 d_h, d_in), W_hh: (4 d_h, d_h), b_ih, b_hh: (4 d_h,)

Tensors are batch-first: a sequence is x: (B, T, d_in).
"""
import torch
from torch import nn


def rnn_cell(x_t, h_prev, W_ih, W_hh, b_ih, b_hh):
    """One step of a vanilla RNN: h_t = tanh(x_t W_ih^T + b_ih + h_prev W_hh^T + b_hh).

    x_t: (B, d_in), h_prev: (B, d_h)
    W_ih: (d_h, d_in), W_hh: (d_h, d_h), b_ih, b_hh: (d_h,)
    returns h_t: (B, d_h)
    """
    return torch.tanh(x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh)


def rnn_forward(x, h0, W_ih, W_hh, b_ih, b_hh):
    """Run the RNN over a whole sequence, carrying the hidden state from step to step.

    x: (B, T, d_in), h0: (B, d_h); weights as in rnn_cell
    returns outputs: (B, T, d_h), the hidden state after every step, and h_T: (B, d_h)
    """
    h_t = h0
    outputs = []
    for t in range(x.size(1)):
        h_t = rnn_cell(x[:, t], h_t, W_ih, W_hh, b_ih, b_hh)
        outputs.append(h_t)
    return torch.stack(outputs, dim=1), h_t


def lstm_cell(x_t, state, W_ih, W_hh, b_ih, b_hh):
    """One step of an LSTM, gates stacked in PyTorch's order i, f, g, o (input, forget, candidate, output).

    x_t: (B, d_in), state: (h_prev, c_prev), each (B, d_h)
    W_ih: (4 d_h, d_in), W_hh: (4 d_h, d_h), b_ih, b_hh: (4 d_h,)
    returns (h_t, c_t), each (B, d_h)
    """
    h_prev, c_prev = state
    z = x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh  # (B, 4 d_h)
    i, f, g, o = z.chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c_t = f * c_prev + i * g
    h_t = o * torch.tanh(c_t)
    return h_t, c_t


def lstm_forward(x, state0, W_ih, W_hh, b_ih, b_hh):
    """Run the LSTM over a whole sequence, carrying h_t and c_t from step to step.

    x: (B, T, d_in), state0: (h0, c0), each (B, d_h); weights as in lstm_cell
    returns outputs: (B, T, d_h), h_t after every step, and the final state (h_T, c_T)
    """
    state = state0
    outputs = []
    for t in range(x.size(1)):
        state = lstm_cell(x[:, t], state, W_ih, W_hh, b_ih, b_hh)
        outputs.append(state[0])
    return torch.stack(outputs, dim=1), state


def gradient_norm_by_distance(model, x):
    """How strongly the last output depends on each earlier input.

    model: a batch-first nn.RNN or nn.LSTM (returns (outputs, state)); x: (B, T, d_in)
    returns norms: (T,); norms[d] is the Euclidean norm of d(outputs[:, -1].sum()) / d x_{T-1-d},
    averaged over the batch. Distance 0 is the last input, distance T-1 the first.
    """
    x = x.detach().requires_grad_(True)
    outputs, _ = model(x)
    (grad,) = torch.autograd.grad(outputs[:, -1].sum(), x)
    return grad.norm(dim=-1).mean(dim=0).flip(0)


class SequenceClassifier(nn.Module):
    """Embed the tokens, run an RNN or LSTM, classify from the last hidden state.

    tokens: (B, T) integer ids -> logits: (B, n_classes)
    Parts: embed = nn.Embedding(vocab_size, d_emb),
           rnn = nn.RNN or nn.LSTM (d_emb -> d_h, batch_first=True), chosen by cell ("rnn" or "lstm"),
           head = nn.Linear(d_h, n_classes)
    """

    def __init__(self, vocab_size, d_emb, d_h, n_classes, cell="lstm"):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_emb)
        recurrent = {"rnn": nn.RNN, "lstm": nn.LSTM}[cell]
        self.rnn = recurrent(d_emb, d_h, batch_first=True)
        self.head = nn.Linear(d_h, n_classes)

    def forward(self, tokens):
        outputs, _ = self.rnn(self.embed(tokens))  # (B, T, d_h)
        return self.head(outputs[:, -1])
