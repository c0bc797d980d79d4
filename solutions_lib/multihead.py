"""Multi-head attention (notebook 06).

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O

The h heads are computed at once: one (d_model, d_model) projection per role,
whose output is split into h slices of width d_k = d_model / h.
Masks are boolean and True where attention is allowed. solutions_lib.fast has
the same module with PyTorch's fused kernels, for training.
"""
import math

import torch
from torch import nn


def split_heads(x, h):
    """Cut the feature axis into h heads and move the head axis forward.

    x: (B, T, d_model) -> (B, h, T, d_k), with d_k = d_model / h;
    head i holds the features i*d_k .. (i+1)*d_k - 1.
    """
    B, T, d_model = x.shape
    return x.view(B, T, h, d_model // h).transpose(1, 2)


def merge_heads(x):
    """Undo split_heads: concatenate the heads along the feature axis.

    x: (B, h, T, d_k) -> (B, T, h * d_k)
    """
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_k)


class MultiHeadAttention(nn.Module):
    """h scaled dot-product attention heads side by side, then the projection W_o.

    Layers: W_q, W_k, W_v, W_o, each nn.Linear(d_model, d_model) with bias (as in nn.MultiheadAttention);
    dropout: nn.Dropout(dropout) on the attention weights, active in training mode only.
    query: (B, T_q, d_model); key, value: (B, T_k, d_model)
    mask: bool, broadcastable to (B, T_q, T_k), True = allowed; shared by all heads
    returns output: (B, T_q, d_model) and weights: (B, h, T_q, T_k), taken before dropout;
    a query whose keys are all masked gets zero weights, so its output is W_o.bias alone
    """

    def __init__(self, d_model, h, dropout=0.0):
        super().__init__()
        assert d_model % h == 0, "d_model must be a multiple of h"
        self.h, self.d_k = h, d_model // h
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.h)
        k = split_heads(self.W_k(key), self.h)
        v = split_heads(self.W_v(value), self.h)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.nan_to_num(0.0)
        return self.W_o(merge_heads(self.dropout(weights) @ v)), weights


def mha_state_from_pytorch(mha):
    """The weights of an nn.MultiheadAttention, named for MultiHeadAttention.

    mha.in_proj_weight: (3 d_model, d_model), W_q, W_k, W_v stacked in that order
    mha.in_proj_bias: (3 d_model,); mha.out_proj: nn.Linear(d_model, d_model)
    returns {"W_q.weight": (d_model, d_model), "W_q.bias": (d_model,), ..., "W_o.bias": (d_model,)}
    """
    state = {}
    weights = mha.in_proj_weight.chunk(3, dim=0)
    biases = mha.in_proj_bias.chunk(3, dim=0)
    for name, w, b in zip(["W_q", "W_k", "W_v"], weights, biases):
        state[f"{name}.weight"], state[f"{name}.bias"] = w.detach().clone(), b.detach().clone()
    state["W_o.weight"] = mha.out_proj.weight.detach().clone()
    state["W_o.bias"] = mha.out_proj.bias.detach().clone()
    return state


def count_parameters(module):
    """Number of trainable numbers in a module; a tensor shared by two layers counts once.

    returns: int
    """
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
