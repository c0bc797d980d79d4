"""Multi-head attention (notebook 06).

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O

The h heads are computed at once: one (d_model, d_model) projection per role,
whose output is split into h slices of width d_k = d_model / h.
Masks are boolean and True where attention is allowed.
"""
import torch
import torch.nn.functional as F
from torch import nn

from solutions_lib.attention import scaled_dot_product_attention


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

    Parameters: W_q, W_k, W_v, W_o, each nn.Linear(d_model, d_model) (with bias,
    like nn.MultiheadAttention).

    query: (B, T_q, d_model); key, value: (B, T_k, d_model)
    mask: bool, broadcastable to (B, T_q, T_k), True = allowed; it is shared by all heads
    returns output: (B, T_q, d_model) and weights: (B, h, T_q, T_k), or None when
    need_weights=False, which uses PyTorch's fused attention (faster, same result).
    """

    def __init__(self, d_model, h, dropout=0.0, bias=True):
        super().__init__()
        assert d_model % h == 0, "d_model must be a multiple of h"
        self.h, self.d_k, self.dropout = h, d_model // h, dropout
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None, need_weights=True):
        q, k, v = self._project(query, key, value)
        if mask is not None:
            mask = mask.unsqueeze(-3)  # (B, 1, T_q, T_k): the same mask for every head
        p = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask)
            if p > 0:  # dropout on the weights, as in the fused path
                weights = F.dropout(weights, p)
                out = weights @ v
        else:
            out, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p), None
        return self.W_o(merge_heads(out)), weights

    def _project(self, query, key, value):
        """Queries, keys and values, split into heads: (B, h, T, d_k) each."""
        if query is key and key is value and self.W_q.bias is not None:
            # self-attention: one matrix product for the three projections
            W = torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight])
            b = torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias])
            q, k, v = F.linear(query, W, b).chunk(3, dim=-1)
        elif key is value and self.W_k.bias is not None:
            # cross-attention: keys and values come from the same memory
            W = torch.cat([self.W_k.weight, self.W_v.weight])
            b = torch.cat([self.W_k.bias, self.W_v.bias])
            q, (k, v) = self.W_q(query), F.linear(key, W, b).chunk(2, dim=-1)
        else:
            q, k, v = self.W_q(query), self.W_k(key), self.W_v(value)
        return split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h)


def mha_state_from_pytorch(mha):
    """The weights of an nn.MultiheadAttention, named for MultiHeadAttention.

    nn.MultiheadAttention stacks W_q, W_k, W_v (in that order) into
    in_proj_weight (3 d_model, d_model) and in_proj_bias (3 d_model,).
    returns {"W_q.weight": (d_model, d_model), "W_q.bias": (d_model,), ..., "W_o.bias": ...}
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
