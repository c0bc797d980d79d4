"""Stand-ins for the building blocks one notebook borrows from another.

Notebook 04 uses notebook 05's `SelfAttention`, 06 and 07 use the masks of 05,
07 uses 06's `MultiHeadAttention` and `count_parameters` and 04's sinusoidal
encoding, 08 trains 07's `Transformer`. In the repository they come from the
reference implementation. The student distribution
(`python -m autograder release --student-dist`) must not contain the reference,
so it gets these instead, through its `course_lib` package.

Decision: each stand-in has the interface of the piece it replaces (same
arguments, same parameter names where weights are loaded by name, same return
values) but is built on PyTorch's own modules and functions, not on the
lesson's code: `F.multi_head_attention_forward` for multi-head attention,
`F.scaled_dot_product_attention` for one head, `nn.TransformerEncoder` /
`nn.TransformerDecoder` for the Transformer. That keeps a stuck learner able to
go on (as in the repository) without handing out the exercise's answer as
readable lesson code. tests/test_student_dist.py checks each stand-in against
the reference. The Transformer stand-in has PyTorch's parameter names, not the
course's; the checks of notebook 08 build their models from it
(autograder.fixtures), so that they are the same in both copies of the course.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "MultiHeadAttention",
    "SelfAttention",
    "Transformer",
    "causal_mask",
    "count_parameters",
    "cross_attention",
    "decoder_layer_state_from_pytorch",
    "encoder_layer_state_from_pytorch",
    "padding_mask",
    "sinusoidal_positional_encoding",
]


# ---------------------------------------------------------------- masks (True = may attend)


def causal_mask(T, device=None):
    """bool (T, T): position i may attend to positions 0..i."""
    return nn.Transformer.generate_square_subsequent_mask(T, device=device) == 0


def padding_mask(lengths, T):
    """lengths: (B,) -> bool (B, 1, T), True at the real tokens of each sequence."""
    rows = [torch.ones(int(n), dtype=torch.bool, device=lengths.device) for n in lengths]
    rows.append(torch.zeros(T, dtype=torch.bool, device=lengths.device))  # pads every row to T
    return nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=False)[:-1, None, :T]


def _hidden(allowed, B, h, T_q, T_k):
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
            hidden, dead = _hidden(mask, B, self.h, T_q, T_k)
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
        out = out.transpose(0, 1)
        if dead is not None and bool(dead.any()):  # nothing to attend to: no attention output
            nothing = self.W_o.bias if self.W_o.bias is not None else torch.zeros_like(out[0, 0])
            out = torch.where(dead[..., None], nothing, out)
            weights = None if weights is None else weights.masked_fill(dead[:, None, :, None], 0.0)
        return out, weights


def count_parameters(module):
    """Number of trainable numbers in a module (a tensor shared by two layers counts once): int."""
    trainable = [p for p in module.parameters() if p.requires_grad]
    return int(sum(map(torch.numel, trainable)))


def sinusoidal_positional_encoding(T, d_model, base=10000.0, dtype=torch.float32):
    """pe: (T, d_model), PE(pos, 2i) = sin(pos / base^(2i/d_model)), PE(pos, 2i+1) = cos(the same)."""
    pairs = (d_model + 1) // 2
    angles = torch.outer(torch.arange(T, dtype=torch.float64), base ** (-torch.arange(pairs, dtype=torch.float64) * 2 / d_model))
    # exp(i (pi/2 - angle)) = sin(angle) + i cos(angle): real and imaginary parts interleave as sin, cos
    pe = torch.view_as_real(torch.polar(torch.ones_like(angles), math.pi / 2 - angles)).flatten(1)
    return pe[:, :d_model].to(dtype)


# ---------------------------------------------------------------- PyTorch's layers, named for the course


def _course_names(mha):
    w, b = mha.in_proj_weight.detach(), mha.in_proj_bias.detach()
    d = w.size(1)
    state = {}
    for i, name in enumerate(["W_q", "W_k", "W_v"]):
        state[f"{name}.weight"], state[f"{name}.bias"] = w[i * d : (i + 1) * d].clone(), b[i * d : (i + 1) * d].clone()
    state["W_o.weight"], state["W_o.bias"] = mha.out_proj.weight.detach().clone(), mha.out_proj.bias.detach().clone()
    return state


def _layer_state(layer, attention):
    state = {f"{mine}.{k}": v for mine, theirs in attention.items() for k, v in _course_names(getattr(layer, theirs)).items()}
    for mine, theirs in (("W_1", "linear1"), ("W_2", "linear2")):
        state |= {f"ffn.{mine}.{k}": v.detach().clone() for k, v in getattr(layer, theirs).state_dict().items()}
    for i in range(1, len(attention) + 2):
        norm = getattr(layer, f"norm{i}")
        state |= {f"norm{i}.gamma": norm.weight.detach().clone(), f"norm{i}.beta": norm.bias.detach().clone()}
    return state


def encoder_layer_state_from_pytorch(layer):
    """The weights of an nn.TransformerEncoderLayer, named for the course's EncoderLayer."""
    return _layer_state(layer, {"self_attn": "self_attn"})


def decoder_layer_state_from_pytorch(layer):
    """The weights of an nn.TransformerDecoderLayer, named for the course's DecoderLayer."""
    return _layer_state(layer, {"self_attn": "self_attn", "cross_attn": "multihead_attn"})


# ---------------------------------------------------------------- the Transformer


class Transformer(nn.Module):
    """The encoder-decoder of notebook 07 (post-norm, ReLU), built from nn.TransformerEncoder / Decoder.

    Same constructor and methods as the course's model: embeddings scaled by
    sqrt(d_model) plus the sinusoidal encoding, encode(src, src_mask) -> memory,
    decode(memory, tgt, src_mask, tgt_mask) -> logits, forward(src, tgt, src_mask, tgt_mask).
    Masks follow the course (True = allowed); the causal mask is always applied.
    Submodules: src_embed, tgt_embed, encoder, decoder (PyTorch's), out.
    """

    def __init__(self, src_vocab, tgt_vocab, d_model=512, h=8, N=6, d_ff=2048, dropout=0.1, max_len=512,
                 tie_weights=False, share_embeddings=False):
        super().__init__()
        self.d_model, self.h = d_model, h
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.src_embed = self.tgt_embed if share_embeddings else nn.Embedding(src_vocab, d_model)
        layer = dict(d_model=d_model, nhead=h, dim_feedforward=d_ff, dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), N, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), N)
        self.out = nn.Linear(d_model, tgt_vocab)
        if tie_weights or share_embeddings:
            self.out.weight = self.tgt_embed.weight
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False)

    def embed(self, embedding, tokens):
        """(B, T) tokens -> (B, T, d_model)."""
        x = embedding(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)].to(embedding.weight.dtype)
        return self.dropout(x)

    def _hidden(self, allowed, B, T_q, T_k):
        return None if allowed is None else _hidden(allowed, B, self.h, T_q, T_k)[0]

    def encode(self, src, src_mask=None):
        """(B, T_src) tokens -> memory (B, T_src, d_model)."""
        B, T = src.shape
        return self.encoder(self.embed(self.src_embed, src), mask=self._hidden(src_mask, B, T, T))

    def decode(self, memory, tgt, src_mask=None, tgt_mask=None):
        """Logits (B, T_tgt, tgt_vocab) for the next token at every target position."""
        (B, T), T_src = tgt.shape, memory.size(1)
        allowed = causal_mask(T, device=tgt.device)
        if tgt_mask is not None:
            allowed = allowed & tgt_mask
        x = self.decoder(self.embed(self.tgt_embed, tgt), memory, tgt_mask=self._hidden(allowed, B, T, T),
                         memory_mask=self._hidden(src_mask, B, T, T_src))
        return self.out(x)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.decode(self.encode(src, src_mask), tgt, src_mask, tgt_mask)


def cross_attention(model, src, ys, layer=-1, pad_id=0):
    """The cross-attention weights of one decoder layer of `model` (a Transformer above) while reading ys.

    src: (B, T_src), ys: (B, T_tgt) with <bos> first
    returns: (B, h, T_tgt, T_src), row t = where the decoder looked to predict token t + 1
    """
    captured = {}
    attn = model.decoder.layers[layer].multihead_attn

    def keep_inputs(module, args, kwargs, output):
        captured["args"], captured["mask"] = args, kwargs.get("attn_mask")

    handle = attn.register_forward_hook(keep_inputs, with_kwargs=True)
    try:
        with torch.no_grad():
            model.eval()
            model(src, ys, (src != pad_id).unsqueeze(1))
            query, key, value = captured["args"][:3]
            _, weights = attn(query, key, value, attn_mask=captured["mask"], need_weights=True, average_attn_weights=False)
    finally:
        handle.remove()
    return weights
