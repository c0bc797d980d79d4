"""Checks for notebook 04: positional encoding."""
import functools

import torch

from autograder.core import Call, Case, Exercise, Mistake
from autograder.fixtures import SelfAttentionFunction
from autograder.inputs import Draw, dims
from autograder.mutants import swap
from solutions_lib import positional as ref

NOTEBOOK = "04_positional_encoding"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


def _table_cases(name, public, hidden):
    """Calls f(n, d_model), or f(n, d_model, dtype=dtype), of a function that builds a table,
    one per (n, d_model[, dtype]) of `public`, then of `hidden`; `name` labels n."""

    def case(n, d_model, dtype=None, hidden=False):
        kwargs = {} if dtype is None else {"dtype": dtype}
        label = dims(**{name: n}, d_model=d_model) + _dtype_label(dtype or torch.float32)
        return Case(label, lambda: Call((n, d_model), kwargs), hidden=hidden, grad=False)

    return [case(*c) for c in public] + [case(*c, hidden=True) for c in hidden]


# ---------------------------------------------------------------- sinusoidal_positional_encoding


def pe_cases():
    return _table_cases("T", public=[(10, 8), (50, 16), (7, 7), (30, 12, torch.float64)], hidden=[(100, 33, torch.float64), (64, 64)])


# ---------------------------------------------------------------- PositionalEncoding


def _module_case(seed, B, T, d_model, max_len, dtype=torch.float32, hidden=False):
    def make():
        return Call((Draw(seed).randn(B, T, d_model, dtype=dtype),), init=(d_model, max_len))

    return Case(dims(B=B, T=T, d_model=d_model, max_len=max_len) + _dtype_label(dtype), make, hidden=hidden)


def pe_module_cases():
    return [
        _module_case(1, 2, 5, 8, 16), _module_case(2, 3, 12, 6, 12), _module_case(3, 1, 4, 10, 50),
        _module_case(4, 4, 9, 16, 20, hidden=True),
    ]


# ---------------------------------------------------------------- shift_matrix


def shift_cases():
    return _table_cases("k", public=[(1, 8), (5, 16), (3, 4, torch.float64), (-2, 6)], hidden=[(17, 32, torch.float64)])


# ---------------------------------------------------------------- LearnedPositionalEmbedding


def _learned_case(seed, B, T, d_model, max_len, hidden=False):
    def make():
        return Call((Draw(seed).randn(B, T, d_model),), init=(max_len, d_model))

    return Case(dims(B=B, T=T, d_model=d_model, max_len=max_len), make, hidden=hidden)


def learned_cases():
    return [
        _learned_case(11, 2, 5, 8, 16), _learned_case(12, 3, 7, 4, 7), _learned_case(13, 1, 3, 6, 10),
        _learned_case(14, 4, 10, 12, 32, hidden=True),
    ]


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
        _gap_case(21, "self-attention + PE", 2, 6, 8), _gap_case(22, "cumulative sum", 3, 5, 4),
        _gap_case(23, "self-attention", 2, 7, 8), _gap_case(24, "softmax over features", 1, 4, 3),
        _gap_case(25, "self-attention + PE", 3, 9, 16, hidden=True),
    ]


# ---------------------------------------------------------------- the catalog

SWAPPED = "sin and cos are swapped: even columns 2i hold sin, odd columns 2i+1 hold cos."
EXPONENT_I = "the exponent uses the pair index i instead of 2i: the frequency of pair i is 1 / 10000^(2i / d_model)."
MULTIPLIED = "the encoding is added to the embeddings (x + PE), not multiplied."
BATCH_AXIS = "you took the positions along the batch axis; tensors are (B, T, d_model), so positions run along axis 1."
PAIR_INDEX = swap("torch.arange(0, d_model, 2, dtype", "torch.arange((d_model + 1) // 2, dtype")  # i = 0, 1, 2, ... where 2i belongs
GAP = "(f(x[:, perm]) - f(x)[:, perm]).abs()"

EXERCISES = [
    Exercise("sinusoidal_positional_encoding", ref.sinusoidal_positional_encoding, points=2, cases=pe_cases, mistakes=[
        Mistake("sin_cos_swapped", SWAPPED, swap("torch.sin(angles)", "torch.cos(angles)") & swap("torch.cos(angles[", "torch.sin(angles[")),
        Mistake("exponent_i", EXPONENT_I, PAIR_INDEX),
        Mistake("positions_dimensions_swapped", "positions and dimensions are swapped: the rows are the T positions, the columns the d_model dimensions.", swap("(T, d_model, base", "(d_model, T, base")),
        Mistake("halves", "you put all the sines first and all the cosines after them; they alternate: sin in column 2i, cos in column 2i+1.", swap("pe[:, 0::2]", "pe[:, : (d_model + 1) // 2]") & swap("pe[:, 1::2]", "pe[:, (d_model + 1) // 2 :]")),
        Mistake("positions_from_one", "positions start at 0, not 1: the first row is sin(0), cos(0), ... = 0, 1, 0, 1, ...", swap("torch.arange(T, ", "torch.arange(1, T + 1, ")),
    ]),
    Exercise("PositionalEncoding", ref.PositionalEncoding, points=2, cases=pe_module_cases, kind="module", depends_on=("sinusoidal_positional_encoding",), mistakes=[
        Mistake("multiplied", MULTIPLIED, swap("x + self.pe", "x * self.pe")),
        Mistake("batch_axis", BATCH_AXIS, swap("self.pe[: x.size(1)]", "self.pe[: x.size(0)].unsqueeze(1)")),
        Mistake("whole_table", "use the first T rows of the table, pe[:T], one per position 0..T-1.", swap("self.pe[: x.size(1)]", "self.pe[-x.size(1) :]")),
    ]),
    Exercise("shift_matrix", ref.shift_matrix, points=2, cases=shift_cases, mistakes=[
        Mistake("transposed_blocks", "your blocks turn the wrong way (a shift by -k): with row vectors, PE(pos + k) = PE(pos) @ M needs the block [[cos, -sin], [sin, cos]].", swap("= cos, -sin", "= cos, sin") & swap("= sin, cos", "= -sin, cos")),
        Mistake("exponent_i", EXPONENT_I, PAIR_INDEX),
        Mistake("sin_cos_swapped", "sin and cos are swapped in your blocks: a rotation by k w_i has cos on the diagonal and ±sin off it.", swap("torch.cos(angle), torch.sin(angle)", "torch.sin(angle), torch.cos(angle)")),
        Mistake("one_position", "the angle of pair i is k w_i: you turned by one position, whatever k is.", swap("angle = k * ", "angle = ")),
    ]),
    Exercise("LearnedPositionalEmbedding", ref.LearnedPositionalEmbedding, points=1, cases=learned_cases, kind="module", mistakes=[
        Mistake("batch_axis", BATCH_AXIS, swap("x.size(1)", "x.size(0)") & swap("self.embedding(positions)", "self.embedding(positions).unsqueeze(1)")),
        Mistake("multiplied", MULTIPLIED, swap("x + self.embedding", "x * self.embedding")),
        Mistake("not_added", "you returned the position embeddings alone; add them to x.", swap("x + self.embedding(positions)", "self.embedding(positions).expand_as(x)")),
    ]),
    Exercise("permutation_gap", ref.permutation_gap, points=1, cases=gap_cases, mistakes=[
        Mistake("not_permuting_output", "you compared f(x[:, perm]) with f(x) itself; permute the output the same way, f(x)[:, perm].", swap(GAP, "(f(x[:, perm]) - f(x)).abs()")),
        Mistake("inverse_permutation", "you permuted the output with the inverse permutation; use the same perm on both sides: f(x)[:, perm].", swap(GAP, "(f(x[:, perm]) - f(x)[:, torch.argsort(perm)]).abs()")),
        Mistake("mean", "return the largest absolute difference (.abs().max()), not the mean.", swap(".abs().max()", ".abs().mean()")),
    ]),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("sinusoidal_positional_encoding", "sin_cos_swapped"), ("PositionalEncoding", "multiplied")]
