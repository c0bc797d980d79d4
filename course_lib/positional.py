"""Notebook 04's sinusoidal encoding for the notebooks after it."""
import math

import torch


def sinusoidal_positional_encoding(T, d_model, base=10000.0, dtype=torch.float32):
    """pe: (T, d_model), PE(pos, 2i) = sin(pos / base^(2i/d_model)), PE(pos, 2i+1) = cos(the same)."""
    pairs = (d_model + 1) // 2
    angles = torch.outer(torch.arange(T, dtype=torch.float64), base ** (-torch.arange(pairs, dtype=torch.float64) * 2 / d_model))
    # exp(i (pi/2 - angle)) = sin(angle) + i cos(angle): real and imaginary parts interleave as sin, cos
    pe = torch.view_as_real(torch.polar(torch.ones_like(angles), math.pi / 2 - angles)).flatten(1)
    return pe[:, :d_model].to(dtype)
