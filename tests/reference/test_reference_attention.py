"""solutions_lib's attention against PyTorch's own implementation."""
import math

import pytest
import torch
import torch.nn.functional as F

import solutions_lib as sl

SHAPES = [  # leading axes, T_q, T_k, d_k, d_v
    ((1,), 1, 1, 4, 4),
    ((2,), 5, 5, 8, 8),
    ((3,), 7, 11, 16, 5),
    ((2, 4), 9, 9, 8, 8),
    ((2, 3), 3, 13, 32, 7),
]


def draw(lead, T_q, T_k, d_k, d_v, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*lead, t, d, generator=g, dtype=dtype, requires_grad=True) for t, d in ((T_q, d_k), (T_k, d_k), (T_k, d_v)))
    return q, k, v


def grads(out, *inputs):
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    return torch.autograd.grad((out * w).sum(), inputs)


def assert_same(ours, theirs, inputs):
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(grads(ours, *inputs), grads(theirs, *inputs)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_no_mask_matches_pytorch(shape):
    q, k, v = draw(*shape)
    out, _ = sl.scaled_dot_product_attention(q, k, v)
    assert_same(out, F.scaled_dot_product_attention(q, k, v), (q, k, v))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_boolean_mask_matches_pytorch(shape):
    lead, T_q, T_k = shape[0], shape[1], shape[2]
    q, k, v = draw(*shape, seed=1)
    mask = torch.rand(*lead, T_q, T_k, generator=torch.Generator().manual_seed(2)) > 0.4
    mask[..., 0] = True
    out, _ = sl.scaled_dot_product_attention(q, k, v, mask)
    assert_same(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v))


@pytest.mark.parametrize("shape", [s for s in SHAPES if s[1] == s[2]], ids=str)
def test_causal_mask_matches_is_causal(shape):
    q, k, v = draw(*shape, seed=3)
    out, _ = sl.scaled_dot_product_attention(q, k, v, sl.causal_mask(shape[1]))
    assert_same(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v))


def test_padding_mask_matches_pytorch_and_broadcasts_over_queries():
    q, k, v = draw((3,), 6, 6, 8, 8, seed=4)
    lengths = torch.tensor([6, 1, 4])
    mask = sl.padding_mask(lengths, 6)
    assert mask.shape == (3, 1, 6) and mask.dtype == torch.bool
    assert mask.sum(-1).flatten().tolist() == lengths.tolist()
    out, weights = sl.scaled_dot_product_attention(q, k, v, mask)
    assert_same(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v))
    assert torch.all(weights[1, :, 1:] == 0)


def test_fully_masked_rows_give_zeros_like_pytorch_and_finite_gradients():
    q, k, v = draw((2,), 4, 5, 8, 3, seed=5)
    mask = torch.ones(2, 4, 5, dtype=torch.bool)
    mask[1, 2] = False
    out, weights = sl.scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(out[1, 2] == 0) and torch.all(weights[1, 2] == 0)
    assert all(torch.isfinite(g).all() for g in grads(out, q, k, v))
    out, _ = sl.scaled_dot_product_attention(q, k, v, mask)
    assert_same(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_weights_are_a_distribution_that_reproduces_the_output(shape):
    q, k, v = draw(*shape, seed=6)
    out, weights = sl.scaled_dot_product_attention(q, k, v)
    assert weights.shape == (*shape[0], shape[1], shape[2])
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    torch.testing.assert_close(weights @ v, out)


def test_scores_are_scaled_by_sqrt_dk():
    q, k, _ = draw((2,), 3, 4, 16, 16, seed=7)
    torch.testing.assert_close(sl.attention_scores(q, k), torch.einsum("btd,bsd->bts", q, k) / math.sqrt(16))


def test_float32_matches_within_float32_tolerance():
    q, k, v = draw((2, 2), 10, 10, 16, 16, dtype=torch.float32, seed=8)
    out, _ = sl.scaled_dot_product_attention(q, k, v, sl.causal_mask(10))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5, rtol=1e-4)


def test_self_attention_module_matches_functional_form():
    torch.manual_seed(0)
    attn = sl.SelfAttention(d_model=12, d_k=6).double()
    x = torch.randn(2, 7, 12, dtype=torch.float64, requires_grad=True)
    mask = sl.causal_mask(7) & sl.padding_mask(torch.tensor([7, 4]), 7)
    out, weights = attn(x, mask)
    q, k, v = sl.qkv_projections(x, attn.W_q.weight.T, attn.W_k.weight.T, attn.W_v.weight.T)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_same(out, expected, (x,))
    assert [n for n, _ in attn.named_parameters()] == ["W_q.weight", "W_k.weight", "W_v.weight"]
