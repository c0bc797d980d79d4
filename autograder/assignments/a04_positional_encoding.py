"""Checks for notebook 04: positional encoding.

Each known mistake is a complete wrong implementation, written as a learner
would write it, self-contained (only torch, math, nn, F), so that the tests can
paste it into a notebook and grade it with nbgrader.
"""
import functools
import math

import torch
from torch import nn

from autograder.core import Call, Case, Exercise, Mistake
from autograder.fixtures import SelfAttentionFunction
from autograder.inputs import Draw, dims
from solutions_lib import positional as ref

NOTEBOOK = "04_positional_encoding"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


# ---------------------------------------------------------------- sinusoidal_positional_encoding


def _pe_case(T, d_model, dtype=None, hidden=False):
    kwargs = {} if dtype is None else {"dtype": dtype}
    label = dims(T=T, d_model=d_model) + ("" if dtype is None else _dtype_label(dtype))
    return Case(label, lambda: Call((T, d_model), kwargs), hidden=hidden, grad=False)


def pe_cases():
    return [
        _pe_case(10, 8),
        _pe_case(50, 16),
        _pe_case(7, 7),
        _pe_case(30, 12, dtype=torch.float64),
        _pe_case(100, 33, dtype=torch.float64, hidden=True),
        _pe_case(64, 64, hidden=True),
    ]


def pe_sin_cos_swapped(T, d_model, base=10000.0, dtype=torch.float32):
    pos = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    angles = pos / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(T, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.cos(angles)
    pe[:, 1::2] = torch.sin(angles[:, : d_model // 2])
    return pe.to(dtype)


def pe_exponent_i(T, d_model, base=10000.0, dtype=torch.float32):
    pos = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    angles = pos / base ** (torch.arange(0, (d_model + 1) // 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(T, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.to(dtype)


def pe_positions_dimensions_swapped(T, d_model, base=10000.0, dtype=torch.float32):
    dim = torch.arange(d_model, dtype=torch.float64).unsqueeze(1)
    angles = dim / base ** (torch.arange(0, T, 2, dtype=torch.float64) / T)
    pe = torch.zeros(d_model, T, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : T // 2])
    return pe.to(dtype)


def pe_halves(T, d_model, base=10000.0, dtype=torch.float32):
    pos = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    angles = pos / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.cat([torch.sin(angles), torch.cos(angles[:, : d_model // 2])], dim=1)
    return pe.to(dtype)


def pe_positions_from_one(T, d_model, base=10000.0, dtype=torch.float32):
    pos = torch.arange(1, T + 1, dtype=torch.float64).unsqueeze(1)
    angles = pos / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(T, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.to(dtype)


# ---------------------------------------------------------------- PositionalEncoding


def _module_case(seed, B, T, d_model, max_len, dtype=torch.float32, hidden=False):
    def make():
        return Call((Draw(seed).randn(B, T, d_model, dtype=dtype),), init=(d_model, max_len))

    return Case(dims(B=B, T=T, d_model=d_model, max_len=max_len) + _dtype_label(dtype), make, hidden=hidden)


def pe_module_cases():
    return [
        _module_case(1, 2, 5, 8, 16),
        _module_case(2, 3, 12, 6, 12),
        _module_case(3, 1, 4, 10, 50),
        _module_case(4, 4, 9, 16, 20, hidden=True),
    ]


class PEMultiplied(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        angles = pos / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angles)
        pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
        self.register_buffer("pe", pe.float())

    def forward(self, x):
        return x * self.pe[: x.size(1)]


class PEBatchAxis(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        angles = pos / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angles)
        pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
        self.register_buffer("pe", pe.float())

    def forward(self, x):
        return x + self.pe[: x.size(0)].unsqueeze(1)


class PEWholeTable(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        angles = pos / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angles)
        pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
        self.register_buffer("pe", pe.float())

    def forward(self, x):
        return x + self.pe[-x.size(1):]


# ---------------------------------------------------------------- shift_matrix


def _shift_case(k, d_model, dtype=None, hidden=False):
    kwargs = {} if dtype is None else {"dtype": dtype}
    label = dims(k=k, d_model=d_model) + ("" if dtype is None else _dtype_label(dtype))
    return Case(label, lambda: Call((k, d_model), kwargs), hidden=hidden, grad=False)


def shift_cases():
    return [
        _shift_case(1, 8),
        _shift_case(5, 16),
        _shift_case(3, 4, dtype=torch.float64),
        _shift_case(-2, 6),
        _shift_case(17, 32, dtype=torch.float64, hidden=True),
    ]


def shift_transposed_blocks(k, d_model, base=10000.0, dtype=torch.float32):
    angle = k / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        c, s = math.cos(angle[i]), math.sin(angle[i])
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, s
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -s, c
    return M.to(dtype)


def shift_exponent_i(k, d_model, base=10000.0, dtype=torch.float32):
    angle = k / base ** (torch.arange(0, d_model // 2, dtype=torch.float64) / d_model)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        c, s = math.cos(angle[i]), math.sin(angle[i])
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, -s
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = s, c
    return M.to(dtype)


def shift_sin_cos_swapped(k, d_model, base=10000.0, dtype=torch.float32):
    angle = k / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        c, s = math.cos(angle[i]), math.sin(angle[i])
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = s, -c
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = c, s
    return M.to(dtype)


def shift_one_position(k, d_model, base=10000.0, dtype=torch.float32):
    angle = 1 / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        c, s = math.cos(angle[i]), math.sin(angle[i])
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, -s
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = s, c
    return M.to(dtype)


# ---------------------------------------------------------------- LearnedPositionalEmbedding


def _learned_case(seed, B, T, d_model, max_len, hidden=False):
    def make():
        return Call((Draw(seed).randn(B, T, d_model),), init=(max_len, d_model))

    return Case(dims(B=B, T=T, d_model=d_model, max_len=max_len), make, hidden=hidden)


def learned_cases():
    return [
        _learned_case(11, 2, 5, 8, 16),
        _learned_case(12, 3, 7, 4, 7),
        _learned_case(13, 1, 3, 6, 10),
        _learned_case(14, 4, 10, 12, 32, hidden=True),
    ]


class LearnedBatchAxis(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x):
        return x + self.embedding(torch.arange(x.size(0))).unsqueeze(1)


class LearnedMultiplied(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x):
        return x * self.embedding(torch.arange(x.size(1)))


class LearnedNotAdded(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x):
        return self.embedding(torch.arange(x.size(1))).expand_as(x)


# ---------------------------------------------------------------- permutation_gap


def _attention_fn(T, d_model, with_positions):
    positions = ref.sinusoidal_positional_encoding(T, d_model, dtype=torch.float64) if with_positions else None
    torch.manual_seed(0)
    return SelfAttentionFunction(d_model, positions)


def _gap_case(seed, f_name, B, T, d_model, hidden=False):
    def make():
        r = Draw(seed)
        x = r.randn(B, T, d_model)
        perm = torch.randperm(T, generator=r.g)
        while T > 2 and torch.equal(perm[perm], torch.arange(T)):  # not its own inverse
            perm = torch.randperm(T, generator=r.g)
        f = {  # picklable, for the student distribution (autograder.fixtures)
            "self-attention": lambda: _attention_fn(T, d_model, False),
            "self-attention + PE": lambda: _attention_fn(T, d_model, True),
            "cumulative sum": lambda: functools.partial(torch.cumsum, dim=1),
            "softmax over features": lambda: functools.partial(torch.softmax, dim=-1),
        }[f_name]()
        return Call((f, x, perm))

    return Case(f"f = {f_name}, " + dims(B=B, T=T, d_model=d_model), make, hidden=hidden, grad=False)


def gap_cases():
    return [
        _gap_case(21, "self-attention + PE", 2, 6, 8),
        _gap_case(22, "cumulative sum", 3, 5, 4),
        _gap_case(23, "self-attention", 2, 7, 8),
        _gap_case(24, "softmax over features", 1, 4, 3),
        _gap_case(25, "self-attention + PE", 3, 9, 16, hidden=True),
    ]


def gap_not_permuting_output(f, x, perm):
    return (f(x[:, perm]) - f(x)).abs().max().item()


def gap_inverse_permutation(f, x, perm):
    return (f(x[:, perm]) - f(x)[:, torch.argsort(perm)]).abs().max().item()


def gap_mean(f, x, perm):
    return (f(x[:, perm]) - f(x)[:, perm]).abs().mean().item()


# ---------------------------------------------------------------- the catalog

SWAPPED = "sin and cos are swapped: even columns 2i hold sin, odd columns 2i+1 hold cos."
EXPONENT_I = "the exponent uses the pair index i instead of 2i: the frequency of pair i is 1 / 10000^(2i / d_model)."
MULTIPLIED = "the encoding is added to the embeddings (x + PE), not multiplied."
BATCH_AXIS = "you took the positions along the batch axis; tensors are (B, T, d_model), so positions run along axis 1."

EXERCISES = [
    Exercise(
        "sinusoidal_positional_encoding",
        ref.sinusoidal_positional_encoding,
        points=2,
        cases=pe_cases,
        mistakes=[
            Mistake("sin_cos_swapped", SWAPPED, pe_sin_cos_swapped),
            Mistake("exponent_i", EXPONENT_I, pe_exponent_i),
            Mistake("positions_dimensions_swapped", "positions and dimensions are swapped: the rows are the T positions, the columns the d_model dimensions.", pe_positions_dimensions_swapped),
            Mistake("halves", "you put all the sines first and all the cosines after them; they alternate: sin in column 2i, cos in column 2i+1.", pe_halves),
            Mistake("positions_from_one", "positions start at 0, not 1: the first row is sin(0), cos(0), ... = 0, 1, 0, 1, ...", pe_positions_from_one),
        ],
    ),
    Exercise(
        "PositionalEncoding",
        ref.PositionalEncoding,
        points=2,
        cases=pe_module_cases,
        kind="module",
        depends_on=("sinusoidal_positional_encoding",),
        mistakes=[
            Mistake("multiplied", MULTIPLIED, PEMultiplied),
            Mistake("batch_axis", BATCH_AXIS, PEBatchAxis),
            Mistake("whole_table", "use the first T rows of the table, pe[:T], one per position 0..T-1.", PEWholeTable),
        ],
    ),
    Exercise(
        "shift_matrix",
        ref.shift_matrix,
        points=2,
        cases=shift_cases,
        mistakes=[
            Mistake("transposed_blocks", "your blocks turn the wrong way (a shift by -k): with row vectors, PE(pos + k) = PE(pos) @ M needs the block [[cos, -sin], [sin, cos]].", shift_transposed_blocks),
            Mistake("exponent_i", EXPONENT_I, shift_exponent_i),
            Mistake("sin_cos_swapped", "sin and cos are swapped in your blocks: a rotation by k w_i has cos on the diagonal and ±sin off it.", shift_sin_cos_swapped),
            Mistake("one_position", "the angle of pair i is k w_i: you turned by one position, whatever k is.", shift_one_position),
        ],
    ),
    Exercise(
        "LearnedPositionalEmbedding",
        ref.LearnedPositionalEmbedding,
        points=1,
        cases=learned_cases,
        kind="module",
        mistakes=[
            Mistake("batch_axis", BATCH_AXIS, LearnedBatchAxis),
            Mistake("multiplied", MULTIPLIED, LearnedMultiplied),
            Mistake("not_added", "you returned the position embeddings alone; add them to x.", LearnedNotAdded),
        ],
    ),
    Exercise(
        "permutation_gap",
        ref.permutation_gap,
        points=1,
        cases=gap_cases,
        mistakes=[
            Mistake("not_permuting_output", "you compared f(x[:, perm]) with f(x) itself; permute the output the same way, f(x)[:, perm].", gap_not_permuting_output),
            Mistake("inverse_permutation", "you permuted the output with the inverse permutation; use the same perm on both sides: f(x)[:, perm].", gap_inverse_permutation),
            Mistake("mean", "return the largest absolute difference (.abs().max()), not the mean.", gap_mean),
        ],
    ),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("sinusoidal_positional_encoding", "sin_cos_swapped"), ("PositionalEncoding", "multiplied")]
