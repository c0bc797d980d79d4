"""Notebook 05's building blocks for the notebooks after it: masks and one head of self-attention,
built on F.scaled_dot_product_attention (the lesson's own code is the learner's, in notebook 05)."""
import torch
import torch.nn.functional as F
from torch import nn


def causal_mask(T, device=None):
    """bool (T, T): position i may attend to positions 0..i."""
    return nn.Transformer.generate_square_subsequent_mask(T, device=device) == 0


def padding_mask(lengths, T):
    """lengths: (B,) -> bool (B, 1, T), True at the real tokens of each sequence."""
    rows = [torch.ones(int(n), dtype=torch.bool, device=lengths.device) for n in lengths]
    rows.append(torch.zeros(T, dtype=torch.bool, device=lengths.device))  # pads every row to T
    return nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=False)[:-1, None, :T]


def hidden_positions(allowed, B, h, T_q, T_k):
    """A course mask (True = allowed, broadcastable to (B, T_q, T_k)) as PyTorch wants it:
    True = hidden, one (T_q, T_k) matrix per batch element and head. Queries that may
    attend to nothing are let through and returned apart, so that they give 0, as in the course."""
    allowed = allowed.expand(B, T_q, T_k)
    dead = ~allowed.any(-1)  # (B, T_q)
    return ~(allowed | dead[..., None]).repeat_interleave(h, dim=0), dead


# ---------------------------------------------------------------- attention


class SelfAttention(nn.Module):
    """One head of self-attention, by F.scaled_dot_product_attention.

    Parameters: W_q, W_k, W_v, each nn.Linear(d_model, d_k, bias=False).
    x: (B, T, d_model); mask: bool broadcastable to (B, T, T), True = allowed
    returns output (B, T, d_k) and weights (B, T, T)
    """

    def __init__(self, d_model, d_k):
        super().__init__()
        for name in ("W_q", "W_k", "W_v"):  # the course's names, made in its order
            self.add_module(name, nn.Linear(d_model, d_k, bias=False))

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        # attending over the identity matrix returns the attention weights themselves
        eye = torch.eye(x.size(1), dtype=x.dtype, device=x.device).expand(x.size(0), -1, -1)
        weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask).nan_to_num(0.0)
        return weights @ v, weights
