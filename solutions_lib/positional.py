"""Positional encodings (notebook 04).

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Pair i turns with angular frequency w_i = 10000^(-2i / d_model): its wavelength
runs from 2 pi (i = 0) to almost 10000 * 2 pi.
"""
import torch
from torch import nn


def sinusoidal_positional_encoding(T, d_model, base=10000.0, dtype=torch.float32):
    """The sinusoidal encoding of positions 0 .. T-1.

    PE(pos, 2i) = sin(pos / base^(2i / d_model)), PE(pos, 2i+1) = cos(pos / base^(2i / d_model));
    with an odd d_model the last column is a sine without its cosine.
    returns pe: (T, d_model) of the given dtype
    """
    positions = torch.arange(T, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    frequencies = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (ceil(d_model / 2),)
    angles = positions * frequencies  # (T, ceil(d_model / 2))
    pe = torch.zeros(T, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.to(dtype)


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding to a batch of (already scaled) token embeddings.

    The table is a buffer named pe, shape (max_len, d_model): saved with the
    module and moved by .to(device), but not trained.
    x: (B, T, d_model) with T <= max_len -> x + pe[:T]: (B, T, d_model)
    """

    def __init__(self, d_model, max_len=512):
        super().__init__()
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))

    def forward(self, x):
        return x + self.pe[: x.size(1)].to(x.dtype)


def shift_matrix(k, d_model, base=10000.0, dtype=torch.float32):
    """The matrix M_k with PE(pos + k) = PE(pos) @ M_k for every position pos.

    d_model must be even. M_k is block diagonal: block i (rows and columns 2i, 2i+1) is
    [[cos(k w_i), -sin(k w_i)], [sin(k w_i), cos(k w_i)]] with w_i = 1 / base^(2i / d_model)
    returns M_k: (d_model, d_model) of the given dtype
    """
    if d_model % 2:
        raise ValueError("a shift is a linear map of the encoding only for an even d_model")
    angle = k * base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d_model / 2,)
    cos, sin = torch.cos(angle), torch.sin(angle)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    M[even, even], M[even, odd] = cos, -sin
    M[odd, even], M[odd, odd] = sin, cos
    return M.to(dtype)


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position, added to the token embeddings.

    self.embedding = nn.Embedding(max_len, d_model)
    x: (B, T, d_model) with T <= max_len -> x + embedding(0 .. T-1): (B, T, d_model)
    """

    def __init__(self, max_len, d_model):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x):
        positions = torch.arange(x.size(1), device=x.device)
        return x + self.embedding(positions)


def permutation_gap(f, x, perm):
    """How far f is from permutation-equivariant on x, for one permutation.

    f maps (B, T, d) to (B, T, d_out); x: (B, T, d); perm: LongTensor (T,), a permutation of 0..T-1.
    f is permutation-equivariant when permuting its input positions permutes its
    output the same way: f(x[:, perm]) == f(x)[:, perm].
    returns the largest |f(x[:, perm]) - f(x)[:, perm]|, a Python float
    """
    return (f(x[:, perm]) - f(x)[:, perm]).abs().max().item()
