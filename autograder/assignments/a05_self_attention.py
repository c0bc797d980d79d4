"""Checks for notebook 05: scaled dot-product attention.

Each known mistake is a complete wrong implementation, written as a learner
would write it. The checks name a mistake when its output equals the learner's;
the repository's tests run every one through its check (mutation tests), also
pasted into a notebook and graded by nbgrader. So each one is self-contained:
it uses only torch, math and nn, never another exercise's function.
"""
import math

import torch
from torch import nn

import solutions_lib as sl
from autograder.core import Call, Case, Exercise, Mistake
from autograder.inputs import Draw, dims

NOTEBOOK = "05_self_attention"

# ---------------------------------------------------------------- qkv_projections


def _qkv_case(seed, B, T, d_model, d_k, d_v, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        x = r.randn(B, T, d_model, dtype=dtype)
        return Call((x, r.randn(d_model, d_k, dtype=dtype), r.randn(d_model, d_k, dtype=dtype), r.randn(d_model, d_v, dtype=dtype)))

    return Case(dims(B=B, T=T, d_model=d_model, d_k=d_k, d_v=d_v) + _dtype_label(dtype), make, hidden=hidden)


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


def qkv_cases():
    return [
        _qkv_case(1, 2, 5, 8, 4, 6),
        _qkv_case(2, 1, 3, 6, 6, 6),
        _qkv_case(3, 3, 4, 5, 3, 2, dtype=torch.float64),
        _qkv_case(4, 4, 7, 10, 5, 3, hidden=True),
    ]


def qkv_same_matrix(x, W_q, W_k, W_v):
    return x @ W_q, x @ W_q, x @ W_q


def qkv_transposed(x, W_q, W_k, W_v):
    return x @ W_q.T, x @ W_k.T, x @ W_v.T


def qkv_wrong_order(x, W_q, W_k, W_v):
    return x @ W_k, x @ W_q, x @ W_v


# ---------------------------------------------------------------- attention_scores


def _scores_case(seed, shape_q, shape_k, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        return Call((r.randn(*shape_q, dtype=dtype), r.randn(*shape_k, dtype=dtype)))

    label = f"q {tuple(shape_q)}, k {tuple(shape_k)}" + _dtype_label(dtype)
    return Case(label, make, hidden=hidden)


def scores_cases():
    return [
        _scores_case(11, (2, 4, 8), (2, 6, 8)),
        _scores_case(12, (1, 5, 16), (1, 5, 16)),
        _scores_case(13, (2, 3, 4, 8), (2, 3, 5, 8)),
        _scores_case(14, (3, 7, 32), (3, 2, 32), dtype=torch.float64, hidden=True),
    ]


def scores_unscaled(q, k):
    return q @ k.transpose(-2, -1)


def scores_divided_by_dk(q, k):
    return q @ k.transpose(-2, -1) / q.size(-1)


def scores_queries_transposed(q, k):
    return q.transpose(-2, -1) @ k / math.sqrt(q.size(-1))


def scores_k_dot_T(q, k):
    return q @ k.T / math.sqrt(q.size(-1))


# ---------------------------------------------------------------- scaled_dot_product_attention


def _sdpa_case(seed, B, T_q, T_k, d_k, d_v, heads=None, mask=None, part="no mask", dtype=torch.float32, hidden=False):
    lead = (B,) if heads is None else (B, heads)

    def make():
        r = Draw(seed)
        q, k, v = r.randn(*lead, T_q, d_k, dtype=dtype), r.randn(*lead, T_k, d_k, dtype=dtype), r.randn(*lead, T_k, d_v, dtype=dtype)
        if mask is None:
            return Call((q, k, v))
        if mask == "random":
            m = r.mask(B, T_q, T_k)
        elif mask == "causal":
            m = sl.causal_mask(T_q)
        elif mask == "padding":
            m = sl.padding_mask(r.integers(1, T_k + 1, B), T_k)
        elif mask == "one row empty":
            m = r.mask(B, T_q, T_k)
            m[0, T_q // 2] = False
        if heads is not None:
            m = m.unsqueeze(1) if m.dim() == 3 else m
        return Call((q, k, v), {"mask": m})

    sizes = dict(B=B) | ({} if heads is None else dict(h=heads)) | dict(T_q=T_q, T_k=T_k, d_k=d_k, d_v=d_v)
    label = dims(**sizes) + ("" if mask is None else f", {mask} mask") + _dtype_label(dtype)
    return Case(label, make, part=part, hidden=hidden)


def sdpa_cases():
    return [
        _sdpa_case(21, 2, 4, 6, 8, 5),
        _sdpa_case(22, 1, 3, 3, 16, 16),
        _sdpa_case(23, 2, 5, 5, 4, 4, heads=3),
        _sdpa_case(24, 2, 4, 6, 8, 5, mask="random", part="masks"),
        _sdpa_case(25, 2, 5, 5, 8, 8, mask="causal", part="masks"),
        _sdpa_case(26, 3, 4, 6, 8, 4, mask="padding", part="masks"),
        _sdpa_case(27, 2, 5, 7, 8, 4, mask="one row empty", part="a query with every key masked"),
        _sdpa_case(28, 3, 7, 9, 12, 6, dtype=torch.float64, hidden=True),
        _sdpa_case(29, 2, 6, 6, 8, 8, heads=2, mask="causal", part="masks", hidden=True),
        _sdpa_case(30, 4, 3, 5, 6, 6, heads=2, mask="one row empty", part="a query with every key masked", hidden=True),
    ]


def sdpa_unscaled(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_divided_by_dk(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.size(-1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_softmax_wrong_axis(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-2).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_mask_after_softmax(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


def sdpa_mask_inverted(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_masked_with_zero(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_nan_rows(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_large_negative(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_keys_not_transposed(q, k, v, mask=None):
    scores = q @ k.T / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_returns_weights(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights, weights


# ---------------------------------------------------------------- masks


def _causal_case(T, hidden=False):
    return Case(f"T={T}", lambda: Call((T,)), hidden=hidden, grad=False)


def causal_cases():
    return [_causal_case(4), _causal_case(1), _causal_case(7), _causal_case(13, hidden=True)]


def causal_inverted(T, device=None):
    return ~torch.ones(T, T, dtype=torch.bool, device=device).tril()


def causal_no_diagonal(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril(-1)


def causal_upper(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).triu()


def causal_float(T, device=None):
    return torch.ones(T, T, device=device).tril()


def _padding_case(lengths, T, hidden=False):
    return Case(f"lengths={lengths}, T={T}", lambda: Call((torch.tensor(lengths), T)), hidden=hidden, grad=False)


def padding_cases():
    return [_padding_case([2, 2], 4), _padding_case([3, 5, 1], 5), _padding_case([7, 2, 7, 4], 8, hidden=True)]


def padding_off_by_one(lengths, T):
    return (torch.arange(T)[None, :] <= lengths[:, None]).unsqueeze(1)


def padding_inverted(lengths, T):
    return (torch.arange(T)[None, :] >= lengths[:, None]).unsqueeze(1)


def padding_no_query_axis(lengths, T):
    return torch.arange(T)[None, :] < lengths[:, None]


# ---------------------------------------------------------------- SelfAttention


def _self_attention_case(seed, B, T, d_model, d_k, mask=None, part="no mask", hidden=False):
    def make():
        r = Draw(seed)
        x = r.randn(B, T, d_model)
        if mask is None:
            return Call((x,), init=(d_model, d_k))
        m = sl.causal_mask(T) if mask == "causal" else sl.padding_mask(r.integers(1, T + 1, B), T)
        return Call((x,), {"mask": m}, init=(d_model, d_k))

    label = dims(B=B, T=T, d_model=d_model, d_k=d_k) + ("" if mask is None else f", {mask} mask")
    return Case(label, make, part=part, hidden=hidden)


def self_attention_cases():
    return [
        _self_attention_case(41, 2, 5, 8, 4),
        _self_attention_case(42, 1, 3, 6, 6),
        _self_attention_case(43, 2, 5, 8, 4, mask="causal", part="with a mask"),
        _self_attention_case(44, 3, 6, 8, 8, mask="padding", part="with a mask"),
        _self_attention_case(45, 3, 7, 12, 8, hidden=True),
        _self_attention_case(46, 2, 9, 10, 6, mask="padding", part="with a mask", hidden=True),
    ]


class SelfAttentionUnprojectedValues(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), x
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return weights @ v, weights


class SelfAttentionIgnoresMask(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        return weights @ v, weights


class SelfAttentionWithBias(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k)
        self.W_k = nn.Linear(d_model, d_k)
        self.W_v = nn.Linear(d_model, d_k)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return weights @ v, weights


# ---------------------------------------------------------------- the catalog

UNSCALED = "you did not divide the scores by sqrt(d_k), so they grow with d_k and saturate the softmax."
BY_DK = "you divided the scores by d_k instead of sqrt(d_k)."
K_T = "k.T reverses every axis of a batched tensor; use k.transpose(-2, -1) to swap only the last two."

EXERCISES = [
    Exercise(
        "qkv_projections",
        sl.qkv_projections,
        points=1,
        cases=qkv_cases,
        returns=("queries", "keys", "values"),
        mistakes=[
            Mistake("same_matrix", "you used W_q for the keys and values too; each of q, k, v has its own matrix.", qkv_same_matrix),
            Mistake("transposed", "you multiplied by W.T; with W of shape (d_model, d_k) the projection is x @ W.", qkv_transposed),
            Mistake("wrong_order", "you returned the projections in the wrong order; return q, k, v.", qkv_wrong_order),
        ],
    ),
    Exercise(
        "attention_scores",
        sl.attention_scores,
        points=2,
        cases=scores_cases,
        mistakes=[
            Mistake("unscaled", UNSCALED, scores_unscaled),
            Mistake("divided_by_dk", BY_DK, scores_divided_by_dk),
            Mistake("queries_transposed", "you computed q^T k, a (d_k, d_k) matrix; the scores are q k^T, one per (query, key) pair.", scores_queries_transposed),
            Mistake("k_dot_T", K_T, scores_k_dot_T),
        ],
    ),
    Exercise(
        "scaled_dot_product_attention",
        sl.scaled_dot_product_attention,
        points=4,
        cases=sdpa_cases,
        parts={"no mask": 2, "masks": 1.5, "a query with every key masked": 0.5},
        depends_on=("attention_scores",),
        returns=("output", "weights"),
        mistakes=[
            Mistake("unscaled", UNSCALED, sdpa_unscaled),
            Mistake("divided_by_dk", BY_DK, sdpa_divided_by_dk),
            Mistake("softmax_wrong_axis", "you took the softmax over the queries (dim=-2); each query's weights over the keys (dim=-1) must sum to 1.", sdpa_softmax_wrong_axis),
            Mistake("mask_after_softmax", "you applied the mask after the softmax, so the allowed weights no longer sum to 1; fill the scores with -inf before it.", sdpa_mask_after_softmax),
            Mistake("mask_inverted", "your mask polarity is inverted: True means 'may attend', so fill the scores where the mask is False.", sdpa_mask_inverted),
            Mistake("masked_with_zero", "you set masked scores to 0 instead of -inf; exp(0) = 1, so masked keys still get weight.", sdpa_masked_with_zero),
            Mistake("large_negative", "you filled masked scores with a large finite number: a query whose keys are all masked then spreads its weight evenly instead of attending to nothing; use -inf and turn the NaN rows into zeros.", sdpa_large_negative),
            Mistake("nan_rows", "a query whose keys are all masked gets NaN (softmax of a row of -inf is 0/0); give such rows zero weight, e.g. weights.nan_to_num(0.0).", sdpa_nan_rows),
            Mistake("keys_not_transposed", K_T, sdpa_keys_not_transposed),
            Mistake("returns_weights", "you returned the weights where the output belongs; return (weights @ v, weights).", sdpa_returns_weights),
        ],
    ),
    Exercise(
        "causal_mask",
        sl.causal_mask,
        points=1,
        cases=causal_cases,
        mistakes=[
            Mistake("inverted", "your mask polarity is inverted: True must mark the allowed positions, on and below the diagonal.", causal_inverted),
            Mistake("no_diagonal", "you left out the diagonal; a position may attend to itself (use tril(), not tril(-1)).", causal_no_diagonal),
            Mistake("upper", "you kept the upper triangle, which lets each position see the future; keep the lower one.", causal_upper),
            Mistake("float", "return a bool mask (True = allowed), not a float tensor of 0s and 1s.", causal_float),
        ],
    ),
    Exercise(
        "padding_mask",
        sl.padding_mask,
        points=1,
        cases=padding_cases,
        mistakes=[
            Mistake("off_by_one", "off by one: a sequence of length L has real tokens at positions 0..L-1 (use <, not <=).", padding_off_by_one),
            Mistake("inverted", "your mask polarity is inverted: True must mark the real tokens, False the padding.", padding_inverted),
            Mistake("no_query_axis", "return shape (B, 1, T): without the middle axis the mask lines up with the wrong axes of (B, T_q, T_k).", padding_no_query_axis),
        ],
    ),
    Exercise(
        "SelfAttention",
        sl.SelfAttention,
        points=3,
        cases=self_attention_cases,
        kind="module",
        parts={"no mask": 2, "with a mask": 1},
        depends_on=("scaled_dot_product_attention",),
        returns=("output", "weights"),
        mistakes=[
            Mistake("unprojected_values", "you used x itself as the values; project them with W_v.", SelfAttentionUnprojectedValues),
            Mistake("ignores_mask", "forward ignores its mask; pass it on to scaled_dot_product_attention.", SelfAttentionIgnoresMask),
            Mistake("bias", "the projections have no bias: use nn.Linear(d_model, d_k, bias=False).", SelfAttentionWithBias),
        ],
    ),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("causal_mask", "inverted"), ("scaled_dot_product_attention", "mask_after_softmax")]
