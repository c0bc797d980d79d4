"""Checks for notebook 04: positional encoding."""
import functools

import torch

from autograder.checks.cases import Call, Case, Exercise
from autograder.fixtures import SelfAttentionFunction
from autograder.inputs import Draw, dims, on_the_meta_device
from solutions_lib import positional as ref

NOTEBOOK = "04_positional_encoding"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


def _table_cases(name, public, hidden, main="main"):
    """Calls f(n, d_model), or f(n, d_model, dtype=dtype), of a function that builds a table,
    one per (n, d_model[, dtype]) of `public`, then of `hidden`; `name` labels n. A call with a dtype
    is in the part "dtype" (the table comes in the dtype asked for), one with an odd d_model in
    "odd d_model"; the others in `main`."""

    def case(n, d_model, dtype=None, hidden=False):
        kwargs = {} if dtype is None else {"dtype": dtype}
        label = dims(**{name: n}, d_model=d_model) + _dtype_label(dtype or torch.float32)
        part = "dtype" if dtype is not None else "odd d_model" if d_model % 2 else main
        return Case(label + (" (odd d_model)" if d_model % 2 else ""), lambda: Call((n, d_model), kwargs),
                    part=part, hidden=hidden, grad=False)

    return [case(*c) for c in public] + [case(*c, hidden=True) for c in hidden]


# ---------------------------------------------------------------- sinusoidal_positional_encoding


def pe_cases():
    return _table_cases("T", public=[(10, 8), (50, 16), (7, 7), (30, 12, torch.float64)],
                        hidden=[(100, 32, torch.float64), (25, 33), (64, 64)])


# ---------------------------------------------------------------- PositionalEncoding


def _module_case(seed, B, T, d_model, max_len, dtype=torch.float32, hidden=False):
    """A batch x of `dtype`; one of half precision is in the part "dtype": the output keeps x's dtype (a float32
    table added as it is would make it float32)."""
    def make():
        return Call((Draw(seed).randn(B, T, d_model).to(dtype),), init=(d_model, max_len))

    part = "dtype" if dtype in (torch.bfloat16, torch.float16) else "main"
    return Case(dims(B=B, T=T, d_model=d_model, max_len=max_len) + _dtype_label(dtype) + (" x: the output keeps its dtype" if part == "dtype" else ""),
                make, part=part, hidden=hidden)


def pe_module_cases():
    return [
        _module_case(1, 2, 5, 8, 16), _module_case(2, 3, 12, 6, 12), _module_case(3, 1, 4, 10, 50),
        _module_case(5, 2, 6, 8, 16, dtype=torch.bfloat16),
        _module_case(4, 4, 9, 16, 20, hidden=True), _module_case(6, 3, 7, 12, 10, dtype=torch.float16, hidden=True),
    ]


# ---------------------------------------------------------------- shift_matrix


def shift_cases():
    even = _table_cases("k", public=[(1, 8), (5, 16), (3, 4, torch.float64), (-2, 6)], hidden=[(17, 32, torch.float64), (9, 20)], main="M_k")

    def odd(k, d_model, hidden=False):  # the text: "for an odd d_model raise a ValueError"
        return Case(dims(k=k, d_model=d_model) + ": odd, so no such matrix", lambda: Call((k, d_model)),
                    part="odd d_model raises", hidden=hidden, grad=False, raises="ValueError")

    return even + [odd(1, 7), odd(4, 9, hidden=True)]


# ---------------------------------------------------------------- LearnedPositionalEmbedding


def _learned_case(seed, B, T, d_model, max_len, hidden=False):
    def make():
        return Call((Draw(seed).randn(B, T, d_model),), init=(max_len, d_model))

    return Case(dims(B=B, T=T, d_model=d_model, max_len=max_len), make, hidden=hidden)


def learned_cases():
    return [
        _learned_case(11, 2, 5, 8, 16), _learned_case(12, 3, 7, 4, 7), _learned_case(13, 1, 3, 6, 10),
        _learned_case(14, 4, 10, 12, 32, hidden=True),
        # the positions too must be made on x's device: on the meta device an embedding handed CPU positions raises as
        # on a GPU (autograder.checks.running.layers_keep_to_meta)
        on_the_meta_device(_learned_case(15, 2, 6, 8, 12)), on_the_meta_device(_learned_case(16, 3, 4, 6, 9), hidden=True),
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


# ---------------------------------------------------------------- the exercises


EXERCISES = [
    Exercise("sinusoidal_positional_encoding", ref.sinusoidal_positional_encoding, points=2, cases=pe_cases,
             parts={"main": 3, "odd d_model": 1, "dtype": 1}),
    Exercise("PositionalEncoding", ref.PositionalEncoding, points=2, cases=pe_module_cases, kind="module",
             depends_on=("sinusoidal_positional_encoding",), parts={"main": 3, "dtype": 1}),
    Exercise("shift_matrix", ref.shift_matrix, points=2, cases=shift_cases, parts={"M_k": 3, "dtype": 1, "odd d_model raises": 1}),
    Exercise("LearnedPositionalEmbedding", ref.LearnedPositionalEmbedding, points=1, cases=learned_cases, kind="module",
             parts={"main": 3, "device": 1}),
    Exercise("permutation_gap", ref.permutation_gap, points=1, cases=gap_cases),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("sinusoidal_positional_encoding", "sin_cos_swapped"), ("PositionalEncoding", "multiplied")]
