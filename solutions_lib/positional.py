"""Positional encodings (notebook 04).

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Pair i turns with angular frequency w_i = 10000^(-2i / d_model): its wavelength
runs from 2 pi (i = 0) to almost 10000 * 2 pi.
"""
import torch
from torch import nn


def frequencies(d_model, base=10000.0, dtype=torch.float32):
    """w_i = base^(-2i / d_model) for i = 0 .. ceil(d_model / 2) - 1."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    return (base ** (-two_i / d_model)).to(dtype)


def sinusoidal_positional_encoding(T, d_model, base=10000.0, dtype=torch.float32):
    """The sinusoidal encoding of positions 0 .. T-1.

    returns pe: (T, d_model); even columns hold sines, odd columns cosines.
    With an odd d_model the last column is a sine without its cosine.
    """
    positions = torch.arange(T, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    angles = positions * frequencies(d_model, base, torch.float64)  # (T, ceil(d_model / 2))
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
    """The matrix M_k with PE(pos + k) = PE(pos) @ M_k for every pos (rows are encodings).

    Pair i of the encoding, (sin(pos w_i), cos(pos w_i)), turns by the angle k w_i:
    M_k is block diagonal with the 2x2 blocks [[cos k w_i, -sin k w_i], [sin k w_i, cos k w_i]].
    d_model must be even (an odd last sine has no cosine to turn with).
    returns M_k: (d_model, d_model)
    """
    if d_model % 2:
        raise ValueError("a shift is a linear map of the encoding only for an even d_model")
    angle = k * frequencies(d_model, base, torch.float64)  # (d_model / 2,)
    cos, sin = torch.cos(angle), torch.sin(angle)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    M[even, even], M[even, odd] = cos, -sin
    M[odd, even], M[odd, odd] = sin, cos
    return M.to(dtype)


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position, added to the token embeddings.

    embedding = nn.Embedding(max_len, d_model)
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

    f maps (B, T, d) to (B, T, d_out); perm: LongTensor (T,), a permutation of 0..T-1.
    f is permutation-equivariant when permuting its input positions permutes its
    output the same way: f(x[:, perm]) == f(x)[:, perm].
    returns the largest |f(x[:, perm]) - f(x)[:, perm]|, a Python float
    """
    return (f(x[:, perm]) - f(x)[:, perm]).abs().max().item()
