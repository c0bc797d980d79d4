"""Checks for notebook 05: scaled dot-product attention."""
import torch

import solutions_lib as sl
from autograder.checks.cases import DEVICE, Call, Case, Exercise
from autograder.inputs import META, Draw, dims, on_the_meta_device

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
        _qkv_case(1, 2, 5, 8, 4, 6), _qkv_case(2, 1, 3, 6, 6, 6), _qkv_case(3, 3, 4, 5, 3, 2, dtype=torch.float64),
        _qkv_case(4, 4, 7, 10, 5, 3, hidden=True),
    ]


# ---------------------------------------------------------------- attention_scores


def _scores_case(seed, shape_q, shape_k, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        return Call((r.randn(*shape_q, dtype=dtype), r.randn(*shape_k, dtype=dtype)))

    label = f"q {tuple(shape_q)}, k {tuple(shape_k)}" + _dtype_label(dtype)
    return Case(label, make, hidden=hidden)


def scores_cases():
    return [
        _scores_case(11, (2, 4, 8), (2, 6, 8)), _scores_case(12, (1, 5, 16), (1, 5, 16)),
        _scores_case(13, (2, 3, 4, 8), (2, 3, 5, 8)), _scores_case(14, (3, 7, 32), (3, 2, 32), dtype=torch.float64, hidden=True),
    ]


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
        _sdpa_case(21, 2, 4, 6, 8, 5), _sdpa_case(22, 1, 3, 3, 16, 16), _sdpa_case(23, 2, 5, 5, 4, 4, heads=3),
        _sdpa_case(24, 2, 4, 6, 8, 5, mask="random", part="masks"), _sdpa_case(25, 2, 5, 5, 8, 8, mask="causal", part="masks"),
        _sdpa_case(26, 3, 4, 6, 8, 4, mask="padding", part="masks"),
        _sdpa_case(27, 2, 5, 7, 8, 4, mask="one row empty", part="a query with every key masked"),
        _sdpa_case(28, 3, 7, 9, 12, 6, dtype=torch.float64, hidden=True),
        _sdpa_case(29, 2, 6, 6, 8, 8, heads=2, mask="causal", part="masks", hidden=True),
        _sdpa_case(30, 4, 3, 5, 6, 6, heads=2, mask="one row empty", part="a query with every key masked", hidden=True),
    ]


# ---------------------------------------------------------------- masks


def _causal_case(T, hidden=False):
    return Case(f"T={T}", lambda: Call((T,)), hidden=hidden, grad=False)


def _causal_device_case(T, hidden=False):
    return Case(f"T={T}, device='meta': the mask on the device asked for", lambda: Call((T,), {"device": META}), part=DEVICE,
                hidden=hidden, grad=False)


def causal_cases():
    return [_causal_case(4), _causal_case(1), _causal_case(7), _causal_case(13, hidden=True),
            _causal_device_case(5), _causal_device_case(9, hidden=True)]


def _padding_case(lengths, T, hidden=False):
    return Case(f"lengths={lengths}, T={T}", lambda: Call((torch.tensor(lengths), T)), hidden=hidden, grad=False)


def padding_cases():
    return [_padding_case([2, 2], 4), _padding_case([3, 5, 1], 5), _padding_case([7, 2, 7, 4], 8, hidden=True),
            on_the_meta_device(_padding_case([3, 1, 4], 4)), on_the_meta_device(_padding_case([2, 6], 6), hidden=True)]


# ---------------------------------------------------------------- SelfAttention


def _self_attention_case(seed, B, T, d_model, d_k, mask=None, part="no mask", hidden=False):
    def make():
        r = Draw(seed)
        x = r.randn(B, T, d_model)
        if mask is None:
            return Call((x,), init=(d_model, d_k))
        if mask == "one row empty":
            m = r.mask(B, T, T)
            m[0, T // 2] = False  # this query may attend to nothing
        else:
            m = sl.causal_mask(T) if mask == "causal" else sl.padding_mask(r.integers(1, T + 1, B), T)
        return Call((x,), {"mask": m}, init=(d_model, d_k))

    label = dims(B=B, T=T, d_model=d_model, d_k=d_k) + ("" if mask is None else f", {mask} mask")
    return Case(label, make, part=part, hidden=hidden)


def self_attention_cases():
    return [
        _self_attention_case(41, 2, 5, 8, 4), _self_attention_case(42, 1, 3, 6, 6),
        _self_attention_case(43, 2, 5, 8, 4, mask="causal", part="with a mask"),
        _self_attention_case(44, 3, 6, 8, 8, mask="padding", part="with a mask"),
        _self_attention_case(47, 2, 5, 8, 4, mask="one row empty", part="with a mask"),
        _self_attention_case(45, 3, 7, 12, 8, hidden=True),
        _self_attention_case(46, 2, 9, 10, 6, mask="padding", part="with a mask", hidden=True),
        _self_attention_case(48, 3, 6, 10, 6, mask="one row empty", part="with a mask", hidden=True),
    ]


# ---------------------------------------------------------------- the exercises


EXERCISES = [
    Exercise("qkv_projections", sl.qkv_projections, points=1, cases=qkv_cases, returns=("queries", "keys", "values")),
    Exercise("attention_scores", sl.attention_scores, points=2, cases=scores_cases),
    Exercise(
        "scaled_dot_product_attention", sl.scaled_dot_product_attention, points=4, cases=sdpa_cases,
        parts={"no mask": 2, "masks": 1.5, "a query with every key masked": 0.5}, depends_on=("attention_scores",),
        returns=("output", "weights"),
    ),
    Exercise("causal_mask", sl.causal_mask, points=1, cases=causal_cases, parts={"main": 3, "device": 1}),
    Exercise("padding_mask", sl.padding_mask, points=1, cases=padding_cases, parts={"main": 3, "device": 1}),
    Exercise(
        "SelfAttention", sl.SelfAttention, points=3, cases=self_attention_cases, kind="module",
        parts={"no mask": 2, "with a mask": 1}, depends_on=("scaled_dot_product_attention",), returns=("output", "weights"),
    ),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("causal_mask", "inverted"), ("scaled_dot_product_attention", "mask_after_softmax")]
