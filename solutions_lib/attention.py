"""Scaled dot-product attention (notebook 05).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Masks are boolean and True where attention is allowed, the convention of
torch.nn.functional.scaled_dot_product_attention.
"""
import math

import torch
from torch import nn


def qkv_projections(x, W_q, W_k, W_v):
    """Project the inputs to queries, keys and values.

    x: (B, T, d_model); W_q, W_k: (d_model, d_k); W_v: (d_model, d_v)
    returns q, k: (B, T, d_k) and v: (B, T, d_v)
    """
    return x @ W_q, x @ W_k, x @ W_v


def attention_scores(q, k):
    """Scaled similarity of every query with every key: q k^T / sqrt(d_k).

    q: (..., T_q, d_k), k: (..., T_k, d_k) -> scores: (..., T_q, T_k)
    """
    d_k = q.size(-1)
    return q @ k.transpose(-2, -1) / math.sqrt(d_k)


def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d_k)) v, with an optional boolean mask.

    q: (..., T_q, d_k), k: (..., T_k, d_k), v: (..., T_k, d_v)
    mask: bool, broadcastable to (..., T_q, T_k), True where attention is allowed
    returns output: (..., T_q, d_v) and weights: (..., T_q, T_k)

    A query whose keys are all masked attends to nothing: its weights and its
    output are zero (softmax over a row of -inf alone would give NaN).
    """
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.nan_to_num(0.0)
    return weights @ v, weights


def causal_mask(T, device=None):
    """Position i may attend to positions 0..i.

    returns: bool (T, T), True on and below the diagonal
    """
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def padding_mask(lengths, T):
    """Hide the padding at the end of each sequence of a batch.

    lengths: (B,) integer tensor, the true length of each sequence
    returns: bool (B, 1, T), True at the real tokens; the middle axis
    broadcasts over the query positions.
    """
    positions = torch.arange(T, device=lengths.device)
    return (positions[None, :] < lengths[:, None]).unsqueeze(1)


class SelfAttention(nn.Module):
    """Single-head self-attention with learned projections W_q, W_k, W_v (no bias).

    x: (B, T, d_model), mask: bool broadcastable to (B, T, T), True = allowed
    returns output: (B, T, d_k) and weights: (B, T, T)
    """

    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        return scaled_dot_product_attention(q, k, v, mask)
