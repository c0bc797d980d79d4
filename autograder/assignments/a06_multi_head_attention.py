"""Checks for notebook 06: multi-head attention."""
import torch
from torch import nn

import solutions_lib as sl
from solutions_lib import multihead as mh
from autograder.checks.cases import Call, Case, Exercise
from autograder.inputs import Draw, dims

NOTEBOOK = "06_multi_head_attention"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


# ---------------------------------------------------------------- split_heads / merge_heads


def _split_case(seed, B, T, d_model, h, dtype=torch.float32, hidden=False):
    def make():
        return Call((Draw(seed).randn(B, T, d_model, dtype=dtype), h))

    return Case(dims(B=B, T=T, d_model=d_model, h=h) + _dtype_label(dtype), make, hidden=hidden)


def split_cases():
    return [
        _split_case(1, 2, 3, 8, 2), _split_case(2, 1, 5, 12, 3), _split_case(3, 3, 4, 6, 1, dtype=torch.float64),
        _split_case(4, 2, 6, 16, 4, hidden=True),
    ]


def _merge_case(seed, B, h, T, d_k, dtype=torch.float32, hidden=False):
    def make():
        return Call((Draw(seed).randn(B, h, T, d_k, dtype=dtype),))

    return Case(dims(B=B, h=h, T=T, d_k=d_k) + _dtype_label(dtype), make, hidden=hidden)


def merge_cases():
    return [
        _merge_case(11, 2, 2, 3, 4), _merge_case(12, 1, 3, 5, 4), _merge_case(13, 3, 4, 2, 2, dtype=torch.float64),
        _merge_case(14, 2, 8, 6, 3, hidden=True),
    ]


# ---------------------------------------------------------------- MultiHeadAttention

EMPTY_ROW = "one query sees no key"


def _mha_case(seed, B, T_q, T_k, d_model, h, mask=None, part="self-attention", dtype=torch.float32, dropout=None, train=False,
              hidden=False):
    """dropout: the module's dropout rate, run in training mode when `train` (the dropout masks drawn right after
    torch.manual_seed(seed), the same for the reference and the learner) and in eval mode otherwise."""
    cross = part == "cross-attention" or T_q != T_k

    def make():
        r = Draw(seed)
        q = r.randn(B, T_q, d_model, dtype=dtype)
        kv = r.randn(B, T_k, d_model, dtype=dtype) if cross else q
        kwargs = {}
        if mask == "causal":
            kwargs["mask"] = sl.causal_mask(T_q)
        elif mask == "padding":
            lengths = r.integers(1, T_k + 1, B)
            lengths[0], lengths[-1] = 1, T_k  # sequences of different lengths
            kwargs["mask"] = sl.padding_mask(lengths, T_k)
        elif mask == "causal+padding":
            kwargs["mask"] = sl.causal_mask(T_q) & sl.padding_mask(r.integers(1, T_k + 1, B), T_k)
        elif mask == EMPTY_ROW:  # a random (B, T_q, T_k) mask in which one query may attend to no key
            m = r.mask(B, T_q, T_k)
            m[0, T_q // 2] = False
            kwargs["mask"] = m
        if dropout is None:
            return Call((q, kv, kv), kwargs, init=(d_model, h))
        return Call((q, kv, kv), kwargs, init=(d_model, h, dropout), seed=seed, train=train)

    says = {None: "", EMPTY_ROW: f", random mask, query {T_q // 2} sees no key"}.get(mask, f", {mask} mask")
    label = dims(B=B, T_q=T_q, T_k=T_k, d_model=d_model, h=h) + says + _dtype_label(dtype)
    if dropout is not None:
        label += f", dropout={dropout} in {'training' if train else 'eval'} mode"
    return Case(label, make, part=part, hidden=hidden)


def mha_cases():
    return [
        _mha_case(21, 2, 5, 5, 8, 2), _mha_case(22, 1, 3, 3, 12, 3), _mha_case(23, 3, 4, 4, 16, 4, hidden=True),
        _mha_case(24, 2, 4, 6, 8, 2, part="cross-attention"), _mha_case(25, 3, 2, 5, 12, 4, part="cross-attention", hidden=True),
        _mha_case(26, 2, 5, 5, 8, 2, mask="causal", part="masks"), _mha_case(27, 2, 3, 6, 8, 2, mask="padding", part="masks"),
        _mha_case(28, 3, 6, 6, 12, 3, mask="causal+padding", part="masks", hidden=True),
        _mha_case(29, 3, 5, 5, 8, 2, mask=EMPTY_ROW, part="masks"),
        _mha_case(30, 2, 4, 7, 12, 3, mask=EMPTY_ROW, part="masks", hidden=True),
        # dropout on the weights in training mode only, the weights returned taken before it
        _mha_case(61, 2, 5, 5, 8, 2, dropout=0.5, train=True, part="dropout"),
        _mha_case(62, 2, 4, 6, 8, 2, dropout=0.5, part="dropout"),
        _mha_case(63, 3, 6, 6, 12, 3, mask="causal", dropout=0.3, train=True, part="dropout", hidden=True),
        _mha_case(64, 2, 3, 5, 12, 4, dropout=0.5, part="dropout", hidden=True),
    ]


# ---------------------------------------------------------------- mha_state_from_pytorch


def _torch_mha_case(seed, d_model, h, hidden=False):
    def make():
        torch.manual_seed(seed)
        return Call((nn.MultiheadAttention(d_model, h, batch_first=True),))

    return Case(dims(d_model=d_model, h=h), make, hidden=hidden, grad=False)


def state_cases():
    return [_torch_mha_case(31, 8, 2), _torch_mha_case(32, 12, 3), _torch_mha_case(33, 16, 4, hidden=True)]


# ---------------------------------------------------------------- count_parameters


def _count_case(label, build, hidden=False):
    def make():
        torch.manual_seed(0)
        return Call((build(),))

    return Case(label, make, hidden=hidden, grad=False)


def _tied():
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 50))
    model[1].weight = model[0].weight
    return model


def _partly_frozen():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    model[0].requires_grad_(False)
    return model


def _mha_with_norm():
    return nn.ModuleList([nn.MultiheadAttention(24, 4), nn.LayerNorm(24)])


def count_cases():
    return [
        _count_case("nn.Linear(10, 3)", lambda: nn.Linear(10, 3)), _count_case("an embedding tied to the output layer", _tied),
        _count_case("a network whose first layer is frozen", _partly_frozen),
        _count_case("nn.MultiheadAttention(24, 4) and a LayerNorm, tied and frozen parts", lambda: _hidden_model(), hidden=True),
    ]


def _hidden_model():
    model = _mha_with_norm()
    model.append(_tied())
    model[1].requires_grad_(False)
    return model


# ---------------------------------------------------------------- the exercises


EXERCISES = [
    Exercise("split_heads", mh.split_heads, points=1, cases=split_cases),
    Exercise("merge_heads", mh.merge_heads, points=1, cases=merge_cases),
    Exercise(
        "MultiHeadAttention", mh.MultiHeadAttention, points=4, cases=mha_cases, kind="module",
        parts={"self-attention": 2, "cross-attention": 1, "masks": 1, "dropout": 0.5}, depends_on=("split_heads", "merge_heads"),
        returns=("output", "weights"),
    ),
    Exercise("mha_state_from_pytorch", mh.mha_state_from_pytorch, points=2, cases=state_cases),
    Exercise("count_parameters", mh.count_parameters, points=1, cases=count_cases),
]

DEMO_MISTAKES = [("merge_heads", "no_transpose"), ("MultiHeadAttention", "scaled_by_d_model")]
