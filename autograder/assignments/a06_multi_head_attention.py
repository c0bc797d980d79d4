"""Checks for notebook 06: multi-head attention."""
import torch
from torch import nn

import solutions_lib as sl
from solutions_lib import multihead as mh
from autograder.core import Call, Case, Exercise, Mistake
from autograder.inputs import Draw, dims
from autograder.mutants import swap

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


def _mha_case(seed, B, T_q, T_k, d_model, h, mask=None, part="self-attention", dtype=torch.float32, hidden=False):
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
        return Call((q, kv, kv), kwargs, init=(d_model, h))

    says = {None: "", EMPTY_ROW: f", random mask, query {T_q // 2} sees no key"}.get(mask, f", {mask} mask")
    label = dims(B=B, T_q=T_q, T_k=T_k, d_model=d_model, h=h) + says + _dtype_label(dtype)
    return Case(label, make, part=part, hidden=hidden)


def mha_cases():
    return [
        _mha_case(21, 2, 5, 5, 8, 2), _mha_case(22, 1, 3, 3, 12, 3), _mha_case(23, 3, 4, 4, 16, 4, hidden=True),
        _mha_case(24, 2, 4, 6, 8, 2, part="cross-attention"), _mha_case(25, 3, 2, 5, 12, 4, part="cross-attention", hidden=True),
        _mha_case(26, 2, 5, 5, 8, 2, mask="causal", part="masks"), _mha_case(27, 2, 3, 6, 8, 2, mask="padding", part="masks"),
        _mha_case(28, 3, 6, 6, 12, 3, mask="causal+padding", part="masks", hidden=True),
        _mha_case(29, 3, 5, 5, 8, 2, mask=EMPTY_ROW, part="masks"),
        _mha_case(30, 2, 4, 7, 12, 3, mask=EMPTY_ROW, part="masks", hidden=True),
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


# ---------------------------------------------------------------- the catalog

# The head axis of the mask inserted at position 1: right for a (B, T_q, T_k) mask, a broadcasting error
# (or, when T_q == h, a silently wrong mask) for the 2-D (T_q, T_k) causal mask.
HEAD_AXIS_1 = swap("mask.unsqueeze(-3)", "mask.unsqueeze(1)")
NAN_TO_ZERO = "        if mask is not None:\n            weights = weights.nan_to_num(0.0)\n"

# Each head's q, k, v reshaped straight to (B, h, T, d_k), without split_heads' transpose.
SPLIT_WITHOUT_TRANSPOSE = (
    swap("split_heads(self.W_q(query), self.h)", "self.W_q(query).view(query.size(0), self.h, query.size(1), self.d_k)")
    & swap("split_heads(self.W_k(key), self.h)", "self.W_k(key).view(key.size(0), self.h, key.size(1), self.d_k)")
    & swap("split_heads(self.W_v(value), self.h)", "self.W_v(value).view(value.size(0), self.h, value.size(1), self.d_k)")
)

EXERCISES = [
    Exercise("split_heads", mh.split_heads, points=1, cases=split_cases, mistakes=[
        Mistake("no_transpose", "you reshaped (B, T, d_model) straight to (B, h, T, d_k), which mixes positions between heads; view it as (B, T, h, d_k) first, then transpose(1, 2).", swap("x.view(B, T, h, d_model // h).transpose(1, 2)", "x.view(B, h, T, d_model // h)")),
        Mistake("interleaved", "you gave each head every h-th feature; head i must get the contiguous slice i*d_k .. (i+1)*d_k - 1, so view as (B, T, h, d_k).", swap(".view(B, T, h, d_model // h).transpose(1, 2)", ".view(B, T, d_model // h, h).permute(0, 3, 1, 2)")),
        Mistake("heads_last", "you left the head axis after the time axis; return (B, h, T, d_k), so that attention runs over T for each head.", swap(".transpose(1, 2)", "")),
    ]),
    Exercise("merge_heads", mh.merge_heads, points=1, cases=merge_cases, mistakes=[
        Mistake("no_transpose", "you reshaped (B, h, T, d_k) straight to (B, T, d_model), which mixes positions; transpose(1, 2) to (B, T, h, d_k) first, then reshape.", swap("x.transpose(1, 2).reshape", "x.reshape")),
        Mistake("interleaved", "you interleaved the heads' features; concatenate them, head 0's d_k features first (transpose(1, 2), then reshape).", swap("x.transpose(1, 2)", "x.permute(0, 2, 3, 1)")),
        Mistake("summed", "you summed the heads; concatenate them along the feature axis, giving width h * d_k.", swap("x.transpose(1, 2).reshape(B, T, h * d_k)", "x.sum(dim=1)")),
    ]),
    Exercise(
        "MultiHeadAttention", mh.MultiHeadAttention, points=4, cases=mha_cases, kind="module",
        parts={"self-attention": 2, "cross-attention": 1, "masks": 1}, depends_on=("split_heads", "merge_heads"),
        returns=("output", "weights"),
        mistakes=[
            Mistake("split_wrong_axis", "your heads are split along the wrong axis: reshape to (B, T, h, d_k) and transpose(1, 2), not straight to (B, h, T, d_k).", SPLIT_WITHOUT_TRANSPOSE),
            Mistake("merge_wrong_order", "you merged the heads in the wrong order: transpose (B, h, T, d_k) back to (B, T, h, d_k) before reshaping to (B, T, d_model).", swap("merge_heads(self.dropout(weights) @ v)", "(self.dropout(weights) @ v).reshape(query.shape)")),
            Mistake("no_output_projection", "the concatenated heads must go through the output projection W_o.", swap("self.W_o(merge_heads(self.dropout(weights) @ v))", "merge_heads(self.dropout(weights) @ v)")),
            Mistake("scaled_by_d_model", "you divided the scores by sqrt(d_model); each head works in d_k = d_model / h dimensions, so divide by sqrt(d_k).", swap("math.sqrt(self.d_k)", "math.sqrt(query.size(-1))")),
            Mistake("divided_by_dk", "you divided the scores by d_k instead of sqrt(d_k).", swap("/ math.sqrt(self.d_k)", "/ self.d_k")),
            Mistake("softmax_wrong_axis", "you took the softmax over the queries (dim=-2); each query's weights over the keys (dim=-1) must sum to 1.", swap("dim=-1", "dim=-2")),
            Mistake("mask_not_broadcast", "your mask is not broadcast over the heads: the scores are (B, h, T_q, T_k), so insert a head axis before the last two, mask.unsqueeze(-3), which fits (T_q, T_k) and (B, T_q, T_k) masks alike.", swap("~mask.unsqueeze(-3)", "~mask")),
            Mistake("mask_head_axis_1", "mask.unsqueeze(1) misplaces the head axis of a 2-D (T_q, T_k) causal mask; use mask.unsqueeze(-3), which fits (T_q, T_k) and (B, T_q, T_k) masks alike.", HEAD_AXIS_1),
            Mistake("mask_inverted", "your mask polarity is inverted: True means 'may attend', so fill the scores with -inf where the mask is False (~mask).", swap("masked_fill(~mask", "masked_fill(mask")),
            Mistake("nan_rows", "a query whose keys are all masked gets NaN (softmax of a row of -inf is 0/0); give such rows zero weight, e.g. weights.nan_to_num(0.0).", swap(NAN_TO_ZERO, "")),
            Mistake("large_negative", "you filled masked scores with a large finite number, so a query whose keys are all masked spreads its weight evenly instead of attending to nothing; use -inf, then nan_to_num(0.0).", swap('float("-inf")', "-1e9")),
            Mistake("averaged_weights", "you averaged the weights over the heads (nn.MultiheadAttention's default); return every head's weights, (B, h, T_q, T_k).", swap(")), weights", ")), weights.mean(dim=1)")),
        ],
    ),
    Exercise("mha_state_from_pytorch", mh.mha_state_from_pytorch, points=2, cases=state_cases, mistakes=[
        Mistake("transposed", "nn.Linear and nn.MultiheadAttention store weights the same way, (out, in): copy them without transposing.", swap("w.detach()", "w.T.detach()") & swap("out_proj.weight.detach()", "out_proj.weight.T.detach()")),
        Mistake("wrong_order", "in_proj_weight stacks the query, key and value matrices in that order: q first.", swap('["W_q", "W_k", "W_v"]', '["W_k", "W_q", "W_v"]')),
        Mistake("no_biases", "copy the biases too: in_proj_bias holds the three input biases and out_proj.bias the output bias.", swap(', state[f"{name}.bias"]', '') & swap(', b.detach().clone()', '') & swap('    state["W_o.bias"] = mha.out_proj.bias.detach().clone()\n', '')),
    ]),
    Exercise("count_parameters", mh.count_parameters, points=1, cases=count_cases, mistakes=[
        Mistake("tensors", "you counted parameter tensors; count the numbers in them, p.numel().", swap("p.numel()", "1")),
        Mistake("shared_twice", "a tensor shared by two layers is one set of parameters: module.parameters() lists it once, so count over that.", swap("p in module.parameters()", "_, p in module.named_parameters(remove_duplicate=False)")),
        Mistake("frozen_too", "count only trainable parameters, those with requires_grad set.", swap(" if p.requires_grad", "")),
    ]),
]

DEMO_MISTAKES = [("merge_heads", "no_transpose"), ("MultiHeadAttention", "scaled_by_d_model")]
