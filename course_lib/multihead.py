"""Notebook 06's building blocks for notebook 07: multi-head attention by F.multi_head_attention_forward,
with the course's parameter names and masks (True = may attend), and counting parameters."""
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention import hidden_positions


class MultiHeadAttention(nn.Module):
    """h attention heads and the output projection, by PyTorch's F.multi_head_attention_forward.

    Parameters: W_q, W_k, W_v, W_o, each nn.Linear(d_model, d_model, bias=bias).
    query: (B, T_q, d_model); key, value: (B, T_k, d_model)
    mask: bool broadcastable to (B, T_q, T_k), True = allowed, shared by all heads
    returns output: (B, T_q, d_model) and weights: (B, h, T_q, T_k) (None when need_weights=False)
    """

    def __init__(self, d_model, h, dropout=0.0, bias=True):
        super().__init__()
        assert d_model % h == 0, "d_model must be a multiple of h"
        self.h, self.dropout = h, dropout
        for name in ("W_q", "W_k", "W_v", "W_o"):  # the course's names, made in its order
            self.add_module(name, nn.Linear(d_model, d_model, bias=bias))

    def forward(self, query, key, value, mask=None, need_weights=True):
        (B, T_q, d_model), T_k = query.shape, key.size(1)
        hidden = dead = None
        if mask is not None:
            hidden, dead = hidden_positions(mask, B, self.h, T_q, T_k)
        biases = [self.W_q.bias, self.W_k.bias, self.W_v.bias]
        out, weights = F.multi_head_attention_forward(
            query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), d_model, self.h,
            in_proj_weight=None, in_proj_bias=None if biases[0] is None else torch.cat(biases),
            bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=self.dropout,
            out_proj_weight=self.W_o.weight, out_proj_bias=self.W_o.bias, training=self.training,
            need_weights=need_weights, attn_mask=hidden, use_separate_proj_weight=True,
            q_proj_weight=self.W_q.weight, k_proj_weight=self.W_k.weight, v_proj_weight=self.W_v.weight,
            average_attn_weights=False,
        )
        out = out.transpose(0, 1).contiguous()  # in the layout of the lesson's: a dropout after it draws the same mask
        if dead is not None:  # a query with nothing to attend to gets no attention output (no branch on values: they may be
            # on a GPU, or on the meta device of the device checks, which has none)
            nothing = self.W_o.bias if self.W_o.bias is not None else torch.zeros_like(out[0, 0])
            out = torch.where(dead[..., None], nothing, out)
            weights = None if weights is None else weights.masked_fill(dead[:, None, :, None], 0.0)
        return out, weights


def count_parameters(module):
    """Number of trainable numbers in a module (a tensor shared by two layers counts once): int."""
    trainable = [p for p in module.parameters() if p.requires_grad]
    return int(sum(map(torch.numel, trainable)))
