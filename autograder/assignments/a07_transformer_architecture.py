"""Checks for notebook 07: the encoder-decoder Transformer.

Each known mistake is a complete wrong implementation, self-contained (only
torch, math, nn, F), so that it can be pasted into a notebook on its own. The
bigger ones carry their own small attention, norm and feed-forward helpers as
methods, with the reference's parameter names, so the reference's weights load.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

import solutions_lib as sl
from solutions_lib import transformer as tf
from autograder.core import Call, Case, Exercise, Mistake
from autograder.inputs import Draw, dims

NOTEBOOK = "07_transformer_architecture"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


def _with_random_norms(cls):
    """A reference factory whose LayerNorms get random gamma and beta, so that mistakes in them show."""

    def build(*init):
        module = cls(*init)
        with torch.no_grad():
            for m in module.modules():
                if isinstance(m, tf.LayerNorm):
                    m.gamma.normal_(1.0, 0.5)
                    m.beta.normal_(0.0, 0.5)
        return module

    build.__name__ = build.__qualname__ = cls.__name__
    return build


# ---------------------------------------------------------------- LayerNorm


def _ln_case(seed, shape, scale=1.0, dtype=torch.float32, hidden=False):
    def make():
        return Call((scale * Draw(seed).randn(*shape, dtype=dtype),), init=(shape[-1],))

    label = f"x {tuple(shape)}" + ("" if scale == 1.0 else f", entries of size {scale:g}") + _dtype_label(dtype)
    return Case(label, make, hidden=hidden)


def ln_cases():
    return [
        _ln_case(1, (2, 5, 8)),
        _ln_case(2, (3, 4, 6), scale=0.01),
        _ln_case(3, (1, 3, 16), dtype=torch.float64),
        _ln_case(4, (4, 7, 12), scale=0.01, dtype=torch.float64, hidden=True),
    ]


class LayerNormEpsOutside(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / (torch.sqrt(var) + self.eps) + self.beta


class LayerNormUnbiased(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class LayerNormOverBatch(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=(0, 1), keepdim=True)
        var = x.var(dim=(0, 1), keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class LayerNormOverTimeToo(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=(-2, -1), keepdim=True)
        var = x.var(dim=(-2, -1), keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class LayerNormNoAffine(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps)


# ---------------------------------------------------------------- FeedForward


def _ff_case(seed, B, T, d_model, d_ff, dtype=torch.float32, hidden=False):
    def make():
        return Call((Draw(seed).randn(B, T, d_model, dtype=dtype),), init=(d_model, d_ff))

    return Case(dims(B=B, T=T, d_model=d_model, d_ff=d_ff) + _dtype_label(dtype), make, hidden=hidden)


def ff_cases():
    return [_ff_case(11, 2, 5, 8, 32), _ff_case(12, 1, 3, 6, 24), _ff_case(13, 3, 4, 12, 48, hidden=True)]


class FeedForwardNoReLU(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.W_1 = nn.Linear(d_model, d_ff)
        self.W_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.W_2(self.dropout(self.W_1(x)))


class FeedForwardReLUAtTheEnd(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.W_1 = nn.Linear(d_model, d_ff)
        self.W_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return torch.relu(self.W_2(self.dropout(torch.relu(self.W_1(x)))))


class FeedForwardGELU(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.W_1 = nn.Linear(d_model, d_ff)
        self.W_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.W_2(self.dropout(F.gelu(self.W_1(x))))


# ---------------------------------------------------------------- layers and stacks: inputs


def _layer_case(seed, kind, B, T_src, T_tgt, d_model, h, d_ff, N=None, masks=False, part="no mask", dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        init = (d_model, h, d_ff) if N is None else (d_model, h, d_ff, N)
        src = r.randn(B, T_src, d_model, dtype=dtype)
        lengths = r.integers(1, T_src + 1, B)
        lengths[0], lengths[-1] = 1, T_src
        src_mask = sl.padding_mask(lengths, T_src) if masks else None
        if kind == "encoder":
            return Call((src,), {"mask": src_mask} if masks else {}, init=init)
        x = r.randn(B, T_tgt, d_model, dtype=dtype)
        tgt_mask = sl.causal_mask(T_tgt)
        if masks:
            return Call((x, src), {"src_mask": src_mask, "tgt_mask": tgt_mask}, init=init)
        return Call((x, src), {"tgt_mask": tgt_mask}, init=init)

    sizes = dict(B=B) | (dict(T=T_src) if kind == "encoder" else dict(T_tgt=T_tgt, T_src=T_src)) | dict(d_model=d_model, h=h, d_ff=d_ff)
    sizes |= {} if N is None else dict(N=N)
    extra = "" if kind == "encoder" else ", causal tgt_mask"
    label = dims(**sizes) + extra + (", source padding mask" if masks else "") + _dtype_label(dtype)
    return Case(label, make, part=part, hidden=hidden)


def encoder_layer_cases():
    return [
        _layer_case(21, "encoder", 2, 5, None, 8, 2, 16),
        _layer_case(22, "encoder", 1, 3, None, 12, 3, 24),
        _layer_case(23, "encoder", 3, 6, None, 8, 2, 16, masks=True, part="padding mask"),
        _layer_case(24, "encoder", 2, 7, None, 16, 4, 32, masks=True, part="padding mask", hidden=True),
        _layer_case(25, "encoder", 2, 4, None, 12, 3, 24, hidden=True),
    ]


def encoder_cases():
    return [
        _layer_case(31, "encoder", 2, 5, None, 8, 2, 16, N=2),
        _layer_case(32, "encoder", 3, 6, None, 8, 2, 16, N=3, masks=True, part="padding mask"),
        _layer_case(33, "encoder", 2, 4, None, 12, 3, 24, N=2, masks=True, part="padding mask", hidden=True),
        _layer_case(34, "encoder", 2, 3, None, 8, 2, 16, N=2, hidden=True),
    ]


def decoder_layer_cases():
    return [
        _layer_case(41, "decoder", 2, 6, 4, 8, 2, 16),
        _layer_case(42, "decoder", 1, 3, 5, 12, 3, 24),
        _layer_case(43, "decoder", 3, 6, 5, 8, 2, 16, masks=True, part="padding mask"),
        _layer_case(44, "decoder", 2, 7, 3, 16, 4, 32, masks=True, part="padding mask", hidden=True),
        _layer_case(45, "decoder", 2, 5, 3, 12, 3, 24, hidden=True),
    ]


def decoder_cases():
    return [
        _layer_case(51, "decoder", 2, 6, 4, 8, 2, 16, N=2),
        _layer_case(52, "decoder", 3, 5, 6, 8, 2, 16, N=3, masks=True, part="padding mask"),
        _layer_case(53, "decoder", 2, 4, 5, 12, 3, 24, N=2, masks=True, part="padding mask", hidden=True),
        _layer_case(54, "decoder", 2, 3, 4, 8, 2, 16, N=2, hidden=True),
    ]


def _transformer_case(seed, B, T_src, T_tgt, src_vocab, tgt_vocab, d_model, h, N, d_ff, masks=False, tie=False, part="no mask", hidden=False):
    def make():
        r = Draw(seed)
        src, tgt = r.integers(0, src_vocab, B, T_src), r.integers(0, tgt_vocab, B, T_tgt)
        init = (src_vocab, tgt_vocab, d_model, h, N, d_ff, 0.1, 32, tie)
        if not masks:
            return Call((src, tgt), init=init)
        lengths = r.integers(1, T_src + 1, B)
        lengths[0], lengths[-1] = 1, T_src
        tgt_lengths = r.integers(1, T_tgt + 1, B)
        return Call((src, tgt), {"src_mask": sl.padding_mask(lengths, T_src), "tgt_mask": sl.padding_mask(tgt_lengths, T_tgt)}, init=init)

    label = dims(B=B, T_src=T_src, T_tgt=T_tgt, src_vocab=src_vocab, tgt_vocab=tgt_vocab, d_model=d_model, h=h, N=N, d_ff=d_ff)
    label += (", padding masks" if masks else "") + (", tie_weights=True" if tie else "")
    return Case(label, make, part=part, hidden=hidden)


def transformer_cases():
    return [
        _transformer_case(61, 2, 5, 4, 11, 13, 8, 2, 1, 16),
        _transformer_case(62, 3, 6, 5, 9, 7, 8, 2, 2, 16, masks=True, part="padding masks"),
        _transformer_case(63, 2, 4, 6, 10, 10, 8, 2, 1, 16, tie=True, part="tied weights"),
        _transformer_case(64, 2, 7, 6, 12, 9, 12, 3, 2, 24, masks=True, part="padding masks", hidden=True),
        _transformer_case(65, 2, 6, 5, 10, 11, 8, 2, 2, 16, hidden=True),
        _transformer_case(66, 2, 5, 4, 9, 9, 12, 3, 1, 24, tie=True, part="tied weights", hidden=True),
    ]


# ---------------------------------------------------------------- mistakes of the layers, stacks and model

class EncoderLayerResidualAfterNorm(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.ffn = self.make_attn(d_model), self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2 = self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, mask=None):
        x = x + self.norm(self.norm1, self.attend(self.self_attn, x, x, mask))
        return x + self.norm(self.norm2, self.ff(self.ffn, x))


class EncoderLayerPreNorm(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.ffn = self.make_attn(d_model), self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2 = self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, mask=None):
        x = x + self.attend(self.self_attn, self.norm(self.norm1, x), self.norm(self.norm1, x), mask)
        return x + self.ff(self.ffn, self.norm(self.norm2, x))


class EncoderLayerNoResidual(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.ffn = self.make_attn(d_model), self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2 = self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, mask=None):
        x = self.norm(self.norm1, self.attend(self.self_attn, x, x, mask))
        return self.norm(self.norm2, self.ff(self.ffn, x))


class EncoderLayerIgnoresMask(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.ffn = self.make_attn(d_model), self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2 = self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, mask=None):
        x = self.norm(self.norm1, x + self.attend(self.self_attn, x, x, None))
        return self.norm(self.norm2, x + self.ff(self.ffn, x))


class EncoderLayerOneNorm(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.ffn = self.make_attn(d_model), self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2 = self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, mask=None):
        x = self.norm(self.norm1, x + self.attend(self.self_attn, x, x, mask))
        return self.norm(self.norm1, x + self.ff(self.ffn, x))


class EncoderNotChained(nn.Module):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__()
        self.h = h
        self.layers = nn.ModuleList(self.make_encoder_layer(d_model, d_ff) for _ in range(N))

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_encoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "ffn": self.make_ffn(d_model, d_ff),
                              "norm1": self.make_norm(d_model), "norm2": self.make_norm(d_model)})

    def encoder_layer(self, L, x, mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, mask))
        return self.norm(L.norm2, x + self.ff(L.ffn, x))

    def forward(self, x, mask=None):
        out = x
        for L in self.layers:
            out = self.encoder_layer(L, x, mask)
        return out


class EncoderSameLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__()
        self.h = h
        self.layers = nn.ModuleList([self.make_encoder_layer(d_model, d_ff)] * N)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_encoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "ffn": self.make_ffn(d_model, d_ff),
                              "norm1": self.make_norm(d_model), "norm2": self.make_norm(d_model)})

    def encoder_layer(self, L, x, mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, mask))
        return self.norm(L.norm2, x + self.ff(L.ffn, x))

    def forward(self, x, mask=None):
        for L in self.layers:
            x = self.encoder_layer(L, x, mask)
        return x


class EncoderDropsMask(nn.Module):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__()
        self.h = h
        self.layers = nn.ModuleList(self.make_encoder_layer(d_model, d_ff) for _ in range(N))

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_encoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "ffn": self.make_ffn(d_model, d_ff),
                              "norm1": self.make_norm(d_model), "norm2": self.make_norm(d_model)})

    def encoder_layer(self, L, x, mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, mask))
        return self.norm(L.norm2, x + self.ff(L.ffn, x))

    def forward(self, x, mask=None):
        for L in self.layers:
            x = self.encoder_layer(L, x, None)
        return x


class DecoderLayerCrossUsesDecoderKeys(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.cross_attn = self.make_attn(d_model), self.make_attn(d_model)
        self.ffn = self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = self.make_norm(d_model), self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm(self.norm1, x + self.attend(self.self_attn, x, x, tgt_mask))
        x = self.norm(self.norm2, x + self.attend(self.cross_attn, x, x, None))
        return self.norm(self.norm3, x + self.ff(self.ffn, x))


class DecoderLayerNoCausalMask(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.cross_attn = self.make_attn(d_model), self.make_attn(d_model)
        self.ffn = self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = self.make_norm(d_model), self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm(self.norm1, x + self.attend(self.self_attn, x, x, None))
        x = self.norm(self.norm2, x + self.attend(self.cross_attn, x, memory, src_mask))
        return self.norm(self.norm3, x + self.ff(self.ffn, x))


class DecoderLayerResidualAfterNorm(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.cross_attn = self.make_attn(d_model), self.make_attn(d_model)
        self.ffn = self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = self.make_norm(d_model), self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = x + self.norm(self.norm1, self.attend(self.self_attn, x, x, tgt_mask))
        x = x + self.norm(self.norm2, self.attend(self.cross_attn, x, memory, src_mask))
        return x + self.norm(self.norm3, self.ff(self.ffn, x))


class DecoderLayerNoCrossAttention(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.cross_attn = self.make_attn(d_model), self.make_attn(d_model)
        self.ffn = self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = self.make_norm(d_model), self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm(self.norm1, x + self.attend(self.self_attn, x, x, tgt_mask))
        return self.norm(self.norm3, x + self.ff(self.ffn, x))


class DecoderLayerMemorySelfAttention(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.h = h
        self.self_attn, self.cross_attn = self.make_attn(d_model), self.make_attn(d_model)
        self.ffn = self.make_ffn(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = self.make_norm(d_model), self.make_norm(d_model), self.make_norm(d_model)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm(self.norm1, x + self.attend(self.self_attn, x, x, tgt_mask))
        x = self.norm(self.norm2, x + self.attend(self.cross_attn, x, self.norm(self.norm1, memory), src_mask))
        return self.norm(self.norm3, x + self.ff(self.ffn, x))


class DecoderNotChained(nn.Module):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__()
        self.h = h
        self.layers = nn.ModuleList(self.make_decoder_layer(d_model, d_ff) for _ in range(N))

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_decoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "cross_attn": self.make_attn(d_model),
                              "ffn": self.make_ffn(d_model, d_ff), "norm1": self.make_norm(d_model),
                              "norm2": self.make_norm(d_model), "norm3": self.make_norm(d_model)})

    def decoder_layer(self, L, x, memory, src_mask, tgt_mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, tgt_mask))
        x = self.norm(L.norm2, x + self.attend(L.cross_attn, x, memory, src_mask))
        return self.norm(L.norm3, x + self.ff(L.ffn, x))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        out = x
        for L in self.layers:
            out = self.decoder_layer(L, x, memory, src_mask, tgt_mask)
        return out


class DecoderSameLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__()
        self.h = h
        self.layers = nn.ModuleList([self.make_decoder_layer(d_model, d_ff)] * N)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_decoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "cross_attn": self.make_attn(d_model),
                              "ffn": self.make_ffn(d_model, d_ff), "norm1": self.make_norm(d_model),
                              "norm2": self.make_norm(d_model), "norm3": self.make_norm(d_model)})

    def decoder_layer(self, L, x, memory, src_mask, tgt_mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, tgt_mask))
        x = self.norm(L.norm2, x + self.attend(L.cross_attn, x, memory, src_mask))
        return self.norm(L.norm3, x + self.ff(L.ffn, x))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for L in self.layers:
            x = self.decoder_layer(L, x, memory, src_mask, tgt_mask)
        return x


class DecoderChainsMemory(nn.Module):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__()
        self.h = h
        self.layers = nn.ModuleList(self.make_decoder_layer(d_model, d_ff) for _ in range(N))

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_decoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "cross_attn": self.make_attn(d_model),
                              "ffn": self.make_ffn(d_model, d_ff), "norm1": self.make_norm(d_model),
                              "norm2": self.make_norm(d_model), "norm3": self.make_norm(d_model)})

    def decoder_layer(self, L, x, memory, src_mask, tgt_mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, tgt_mask))
        x = self.norm(L.norm2, x + self.attend(L.cross_attn, x, memory, src_mask))
        return self.norm(L.norm3, x + self.ff(L.ffn, x))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for L in self.layers:
            x = self.decoder_layer(L, x, memory, src_mask, tgt_mask)
            memory = x
        return x


class TransformerNoScaling(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=512, h=8, N=6, d_ff=2048, dropout=0.1, max_len=512,
                 tie_weights=False, share_embeddings=False):
        super().__init__()
        self.h, self.d_model = h, d_model
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.src_embed = self.tgt_embed if share_embeddings else nn.Embedding(src_vocab, d_model)
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(self.make_encoder_layer(d_model, d_ff) for _ in range(N))
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList(self.make_decoder_layer(d_model, d_ff) for _ in range(N))
        self.out = nn.Linear(d_model, tgt_vocab)
        if tie_weights or share_embeddings:
            self.out.weight = self.tgt_embed.weight
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]
        freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
        self.register_buffer("pe", pe, persistent=False)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_encoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "ffn": self.make_ffn(d_model, d_ff),
                              "norm1": self.make_norm(d_model), "norm2": self.make_norm(d_model)})

    def make_decoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "cross_attn": self.make_attn(d_model),
                              "ffn": self.make_ffn(d_model, d_ff), "norm1": self.make_norm(d_model),
                              "norm2": self.make_norm(d_model), "norm3": self.make_norm(d_model)})

    def encoder_layer(self, L, x, mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, mask))
        return self.norm(L.norm2, x + self.ff(L.ffn, x))

    def decoder_layer(self, L, x, memory, src_mask, tgt_mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, tgt_mask))
        x = self.norm(L.norm2, x + self.attend(L.cross_attn, x, memory, src_mask))
        return self.norm(L.norm3, x + self.ff(L.ffn, x))

    def embed(self, table, tokens):
        return table(tokens) + self.pe[: tokens.size(1)]

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        x = self.embed(self.src_embed, src)
        for L in self.encoder.layers:
            x = self.encoder_layer(L, x, src_mask)
        T = tgt.size(1)
        mask = torch.ones(T, T, dtype=torch.bool, device=tgt.device).tril()
        if tgt_mask is not None:
            mask = mask & tgt_mask if mask is not None else tgt_mask
        y = self.embed(self.tgt_embed, tgt)
        for L in self.decoder.layers:
            y = self.decoder_layer(L, y, x, src_mask, mask)
        return self.out(y)


class TransformerNoPositions(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=512, h=8, N=6, d_ff=2048, dropout=0.1, max_len=512,
                 tie_weights=False, share_embeddings=False):
        super().__init__()
        self.h, self.d_model = h, d_model
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.src_embed = self.tgt_embed if share_embeddings else nn.Embedding(src_vocab, d_model)
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(self.make_encoder_layer(d_model, d_ff) for _ in range(N))
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList(self.make_decoder_layer(d_model, d_ff) for _ in range(N))
        self.out = nn.Linear(d_model, tgt_vocab)
        if tie_weights or share_embeddings:
            self.out.weight = self.tgt_embed.weight
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]
        freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
        self.register_buffer("pe", pe, persistent=False)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_encoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "ffn": self.make_ffn(d_model, d_ff),
                              "norm1": self.make_norm(d_model), "norm2": self.make_norm(d_model)})

    def make_decoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "cross_attn": self.make_attn(d_model),
                              "ffn": self.make_ffn(d_model, d_ff), "norm1": self.make_norm(d_model),
                              "norm2": self.make_norm(d_model), "norm3": self.make_norm(d_model)})

    def encoder_layer(self, L, x, mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, mask))
        return self.norm(L.norm2, x + self.ff(L.ffn, x))

    def decoder_layer(self, L, x, memory, src_mask, tgt_mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, tgt_mask))
        x = self.norm(L.norm2, x + self.attend(L.cross_attn, x, memory, src_mask))
        return self.norm(L.norm3, x + self.ff(L.ffn, x))

    def embed(self, table, tokens):
        return table(tokens) * math.sqrt(self.d_model)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        x = self.embed(self.src_embed, src)
        for L in self.encoder.layers:
            x = self.encoder_layer(L, x, src_mask)
        T = tgt.size(1)
        mask = torch.ones(T, T, dtype=torch.bool, device=tgt.device).tril()
        if tgt_mask is not None:
            mask = mask & tgt_mask if mask is not None else tgt_mask
        y = self.embed(self.tgt_embed, tgt)
        for L in self.decoder.layers:
            y = self.decoder_layer(L, y, x, src_mask, mask)
        return self.out(y)


class TransformerNoCausalMask(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=512, h=8, N=6, d_ff=2048, dropout=0.1, max_len=512,
                 tie_weights=False, share_embeddings=False):
        super().__init__()
        self.h, self.d_model = h, d_model
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.src_embed = self.tgt_embed if share_embeddings else nn.Embedding(src_vocab, d_model)
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(self.make_encoder_layer(d_model, d_ff) for _ in range(N))
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList(self.make_decoder_layer(d_model, d_ff) for _ in range(N))
        self.out = nn.Linear(d_model, tgt_vocab)
        if tie_weights or share_embeddings:
            self.out.weight = self.tgt_embed.weight
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]
        freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
        self.register_buffer("pe", pe, persistent=False)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_encoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "ffn": self.make_ffn(d_model, d_ff),
                              "norm1": self.make_norm(d_model), "norm2": self.make_norm(d_model)})

    def make_decoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "cross_attn": self.make_attn(d_model),
                              "ffn": self.make_ffn(d_model, d_ff), "norm1": self.make_norm(d_model),
                              "norm2": self.make_norm(d_model), "norm3": self.make_norm(d_model)})

    def encoder_layer(self, L, x, mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, mask))
        return self.norm(L.norm2, x + self.ff(L.ffn, x))

    def decoder_layer(self, L, x, memory, src_mask, tgt_mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, tgt_mask))
        x = self.norm(L.norm2, x + self.attend(L.cross_attn, x, memory, src_mask))
        return self.norm(L.norm3, x + self.ff(L.ffn, x))

    def embed(self, table, tokens):
        return table(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)]

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        x = self.embed(self.src_embed, src)
        for L in self.encoder.layers:
            x = self.encoder_layer(L, x, src_mask)
        T = tgt.size(1)
        mask = None
        if tgt_mask is not None:
            mask = mask & tgt_mask if mask is not None else tgt_mask
        y = self.embed(self.tgt_embed, tgt)
        for L in self.decoder.layers:
            y = self.decoder_layer(L, y, x, src_mask, mask)
        return self.out(y)


class TransformerScaledAfterPositions(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=512, h=8, N=6, d_ff=2048, dropout=0.1, max_len=512,
                 tie_weights=False, share_embeddings=False):
        super().__init__()
        self.h, self.d_model = h, d_model
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.src_embed = self.tgt_embed if share_embeddings else nn.Embedding(src_vocab, d_model)
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(self.make_encoder_layer(d_model, d_ff) for _ in range(N))
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList(self.make_decoder_layer(d_model, d_ff) for _ in range(N))
        self.out = nn.Linear(d_model, tgt_vocab)
        if tie_weights or share_embeddings:
            self.out.weight = self.tgt_embed.weight
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]
        freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
        self.register_buffer("pe", pe, persistent=False)

    def make_attn(self, d_model):
        return nn.ModuleDict({n: nn.Linear(d_model, d_model) for n in ("W_q", "W_k", "W_v", "W_o")})

    def make_norm(self, d_model):
        return nn.ParameterDict({"gamma": nn.Parameter(torch.ones(d_model)), "beta": nn.Parameter(torch.zeros(d_model))})

    def make_ffn(self, d_model, d_ff):
        return nn.ModuleDict({"W_1": nn.Linear(d_model, d_ff), "W_2": nn.Linear(d_ff, d_model)})

    def attend(self, p, x, kv, mask):
        B, T, d_model = x.shape
        q = p.W_q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = p.W_k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        v = p.W_v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
        return p.W_o(out.transpose(1, 2).reshape(B, T, d_model))

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], p.gamma, p.beta, 1e-5)

    def ff(self, p, x):
        return p.W_2(torch.relu(p.W_1(x)))

    def make_encoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "ffn": self.make_ffn(d_model, d_ff),
                              "norm1": self.make_norm(d_model), "norm2": self.make_norm(d_model)})

    def make_decoder_layer(self, d_model, d_ff):
        return nn.ModuleDict({"self_attn": self.make_attn(d_model), "cross_attn": self.make_attn(d_model),
                              "ffn": self.make_ffn(d_model, d_ff), "norm1": self.make_norm(d_model),
                              "norm2": self.make_norm(d_model), "norm3": self.make_norm(d_model)})

    def encoder_layer(self, L, x, mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, mask))
        return self.norm(L.norm2, x + self.ff(L.ffn, x))

    def decoder_layer(self, L, x, memory, src_mask, tgt_mask):
        x = self.norm(L.norm1, x + self.attend(L.self_attn, x, x, tgt_mask))
        x = self.norm(L.norm2, x + self.attend(L.cross_attn, x, memory, src_mask))
        return self.norm(L.norm3, x + self.ff(L.ffn, x))

    def embed(self, table, tokens):
        return (table(tokens) + self.pe[: tokens.size(1)]) * math.sqrt(self.d_model)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        x = self.embed(self.src_embed, src)
        for L in self.encoder.layers:
            x = self.encoder_layer(L, x, src_mask)
        T = tgt.size(1)
        mask = torch.ones(T, T, dtype=torch.bool, device=tgt.device).tril()
        if tgt_mask is not None:
            mask = mask & tgt_mask if mask is not None else tgt_mask
        y = self.embed(self.tgt_embed, tgt)
        for L in self.decoder.layers:
            y = self.decoder_layer(L, y, x, src_mask, mask)
        return self.out(y)


# ---------------------------------------------------------------- the catalog

AFTER_NORM = "the residual goes inside the norm, LayerNorm(x + Sublayer(x)); you added it after the norm."

EXERCISES = [
    Exercise(
        "LayerNorm",
        _with_random_norms(tf.LayerNorm),
        points=2,
        cases=ln_cases,
        kind="module",
        mistakes=[
            Mistake("eps_outside_sqrt", "eps belongs inside the square root, sqrt(var + eps); outside it changes the result when the variance is small.", LayerNormEpsOutside),
            Mistake("unbiased", "use the biased variance (divide by d_model): x.var(dim=-1, unbiased=False).", LayerNormUnbiased),
            Mistake("over_batch", "you normalised over the batch (like BatchNorm); LayerNorm normalises each token vector over its own d_model features, dim=-1.", LayerNormOverBatch),
            Mistake("over_time_too", "you normalised over time and features together; take the mean and variance over the last axis only, one token at a time.", LayerNormOverTimeToo),
            Mistake("no_affine", "after normalising, scale by gamma and shift by beta.", LayerNormNoAffine),
        ],
    ),
    Exercise(
        "FeedForward",
        tf.FeedForward,
        points=1,
        cases=ff_cases,
        kind="module",
        mistakes=[
            Mistake("no_relu", "without the ReLU between W_1 and W_2 the two layers collapse into one linear map.", FeedForwardNoReLU),
            Mistake("relu_at_the_end", "the ReLU goes between W_1 and W_2 only; the output of W_2 is not passed through it.", FeedForwardReLUAtTheEnd),
            Mistake("gelu", "the paper's feed-forward network uses ReLU, not GELU.", FeedForwardGELU),
        ],
    ),
    Exercise(
        "EncoderLayer",
        _with_random_norms(tf.EncoderLayer),
        points=3,
        cases=encoder_layer_cases,
        kind="module",
        parts={"no mask": 2, "padding mask": 1},
        depends_on=("LayerNorm", "FeedForward"),
        mistakes=[
            Mistake("residual_after_norm", AFTER_NORM, EncoderLayerResidualAfterNorm),
            Mistake("pre_norm", "you normalised before each sublayer (pre-norm); this course follows the paper: x = LayerNorm(x + Sublayer(x)).", EncoderLayerPreNorm),
            Mistake("no_residual", "each sublayer's input must be added back (the residual connection) before the norm: LayerNorm(x + Sublayer(x)).", EncoderLayerNoResidual),
            Mistake("ignores_mask", "pass the mask on to the self-attention, so that no token attends to padding.", EncoderLayerIgnoresMask),
            Mistake("one_norm", "each sublayer has its own LayerNorm: norm1 after attention, norm2 after the feed-forward network.", EncoderLayerOneNorm),
        ],
    ),
    Exercise(
        "Encoder",
        _with_random_norms(tf.Encoder),
        points=2,
        cases=encoder_cases,
        kind="module",
        parts={"no mask": 2, "padding mask": 1},
        depends_on=("EncoderLayer",),
        mistakes=[
            Mistake("not_chained", "each layer must take the previous layer's output (x = layer(x, mask)), not the stack's input.", EncoderNotChained),
            Mistake("same_layer", "[layer] * N repeats one layer object N times, so all layers share weights; build N separate layers.", EncoderSameLayer),
            Mistake("drops_mask", "pass the mask to every layer.", EncoderDropsMask),
        ],
    ),
    Exercise(
        "DecoderLayer",
        _with_random_norms(tf.DecoderLayer),
        points=3,
        cases=decoder_layer_cases,
        kind="module",
        parts={"no mask": 2, "padding mask": 1},
        depends_on=("LayerNorm", "FeedForward"),
        mistakes=[
            Mistake("cross_uses_decoder_keys", "in cross-attention the queries come from the decoder but the keys and values from the encoder's output (memory).", DecoderLayerCrossUsesDecoderKeys),
            Mistake("no_causal_mask", "the decoder's self-attention must use tgt_mask, the causal mask, or each position sees the future.", DecoderLayerNoCausalMask),
            Mistake("residual_after_norm", AFTER_NORM, DecoderLayerResidualAfterNorm),
            Mistake("no_cross_attention", "the decoder layer has three sublayers: masked self-attention, cross-attention to memory, feed-forward.", DecoderLayerNoCrossAttention),
            Mistake("memory_normalised", "use the encoder's output (memory) as it is for the keys and values of cross-attention.", DecoderLayerMemorySelfAttention),
        ],
    ),
    Exercise(
        "Decoder",
        _with_random_norms(tf.Decoder),
        points=2,
        cases=decoder_cases,
        kind="module",
        parts={"no mask": 2, "padding mask": 1},
        depends_on=("DecoderLayer",),
        mistakes=[
            Mistake("not_chained", "each layer must take the previous layer's output (x = layer(x, memory, ...)), not the stack's input.", DecoderNotChained),
            Mistake("same_layer", "[layer] * N repeats one layer object N times, so all layers share weights; build N separate layers.", DecoderSameLayer),
            Mistake("chains_memory", "every decoder layer attends to the same memory, the encoder's final output.", DecoderChainsMemory),
        ],
    ),
    Exercise(
        "Transformer",
        _with_random_norms(tf.Transformer),
        points=4,
        cases=transformer_cases,
        kind="module",
        parts={"no mask": 2, "padding masks": 1, "tied weights": 1},
        depends_on=("Encoder", "Decoder"),
        mistakes=[
            Mistake("no_scaling", "multiply the token embeddings by sqrt(d_model) before adding the positional encoding.", TransformerNoScaling),
            Mistake("no_positions", "add the sinusoidal positional encoding to the scaled embeddings; without it the model cannot tell positions apart.", TransformerNoPositions),
            Mistake("no_causal_mask", "the decoder must always get the causal mask (combined with tgt_mask when one is given), or each position sees the future.", TransformerNoCausalMask),
            Mistake("scaled_after_positions", "scale the embeddings by sqrt(d_model) before adding the positional encoding, not the sum.", TransformerScaledAfterPositions),
        ],
    ),
]

DEMO_MISTAKES = [("LayerNorm", "unbiased"), ("DecoderLayer", "cross_uses_decoder_keys")]
