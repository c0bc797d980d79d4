"""solutions_lib's multi-head attention against nn.MultiheadAttention with the same weights."""
import pytest
import torch
from torch import nn

import copy

from solutions_lib.attention import causal_mask, padding_mask
from solutions_lib.fast import fuse
from solutions_lib.multihead import MultiHeadAttention, count_parameters, merge_heads, mha_state_from_pytorch, split_heads

SIZES = [  # B, T_q, T_k, d_model, h
    (1, 1, 1, 4, 1),
    (2, 5, 5, 8, 2),
    (3, 7, 11, 16, 4),
    (2, 9, 4, 24, 8),
]


def pair(d_model, h, seed=0):
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(d_model, h, batch_first=True, dtype=torch.float64)
    ours = MultiHeadAttention(d_model, h).double()
    ours.load_state_dict(mha_state_from_pytorch(theirs))
    return ours, theirs


def draw(B, T, d_model, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, d_model, generator=g, dtype=torch.float64, requires_grad=True)


def grads(out, inputs):
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    return torch.autograd.grad((out * w).sum(), inputs, retain_graph=True)


def assert_same(ours, theirs, inputs):
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(grads(ours, inputs), grads(theirs, inputs)):
        torch.testing.assert_close(a, b)


def test_split_and_merge_heads_are_inverse_and_slice_features():
    x = torch.arange(2 * 3 * 12.0).reshape(2, 3, 12)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 3)
    torch.testing.assert_close(heads[:, 1], x[..., 3:6])
    torch.testing.assert_close(merge_heads(heads), x)


@pytest.mark.parametrize("size", SIZES, ids=str)
@pytest.mark.parametrize("fused", [False, True])
def test_self_attention_matches_pytorch(size, fused):
    B, T, _, d_model, h = size
    ours, theirs = pair(d_model, h)
    if fused:
        ours = fuse(ours)
    x = draw(B, T, d_model, 1)
    out, w = ours(x, x, x)
    ref, ref_w = theirs(x, x, x, average_attn_weights=False)
    assert_same(out, ref, [x])
    # PyTorch packs W_q, W_k, W_v into one tensor: compare the gradients packed the same way
    g_ours = grads(out, list(ours.parameters()))
    g_theirs = grads(ref, [theirs.in_proj_weight, theirs.in_proj_bias, theirs.out_proj.weight, theirs.out_proj.bias])
    torch.testing.assert_close(torch.cat([g_ours[0], g_ours[2], g_ours[4]]), g_theirs[0])
    torch.testing.assert_close(torch.cat([g_ours[1], g_ours[3], g_ours[5]]), g_theirs[1])
    torch.testing.assert_close(g_ours[6], g_theirs[2])
    torch.testing.assert_close(g_ours[7], g_theirs[3])
    if not fused:
        torch.testing.assert_close(w, ref_w)
    else:
        assert w is None


@pytest.mark.parametrize("size", SIZES, ids=str)
def test_cross_attention_with_key_padding_matches_pytorch(size):
    B, T_q, T_k, d_model, h = size
    ours, theirs = pair(d_model, h, seed=2)
    q, kv = draw(B, T_q, d_model, 3), draw(B, T_k, d_model, 4)
    lengths = torch.randint(1, T_k + 1, (B,), generator=torch.Generator().manual_seed(5))
    allowed = padding_mask(lengths, T_k)  # (B, 1, T_k), True = allowed
    out, w = ours(q, kv, kv, allowed)
    # PyTorch's key_padding_mask is (B, T_k) and True where a key is *hidden*
    ref, ref_w = theirs(q, kv, kv, key_padding_mask=~allowed.squeeze(1), average_attn_weights=False)
    assert_same(out, ref, [q, kv])
    torch.testing.assert_close(w, ref_w)
    fast, _ = fuse(copy.deepcopy(ours))(q, kv, kv, allowed)
    assert_same(fast, ref, [q, kv])


@pytest.mark.parametrize("size", [s for s in SIZES if s[1] == s[2]], ids=str)
def test_causal_mask_matches_pytorch_attn_mask(size):
    B, T, _, d_model, h = size
    ours, theirs = pair(d_model, h, seed=6)
    x = draw(B, T, d_model, 7)
    out, w = ours(x, x, x, causal_mask(T))
    ref, ref_w = theirs(x, x, x, attn_mask=~causal_mask(T), average_attn_weights=False)  # True = hidden
    assert_same(out, ref, [x])
    torch.testing.assert_close(w, ref_w)
    fast, _ = fuse(copy.deepcopy(ours))(x, x, x, causal_mask(T))
    assert_same(fast, ref, [x])


def test_a_different_mask_per_sequence_broadcasts_over_heads():
    ours, _ = pair(8, 2, seed=8)
    x = draw(3, 5, 8, 9)
    mask = causal_mask(5) & padding_mask(torch.tensor([5, 2, 4]), 5)
    _, w = ours(x, x, x, mask)
    assert w.shape == (3, 2, 5, 5)
    assert torch.all(w[1, :, :, 2:] == 0) and torch.all(w.triu(1) == 0)


def test_count_parameters_matches_formula_and_counts_shared_tensors_once():
    mha = MultiHeadAttention(512, 8)
    assert count_parameters(mha) == 4 * (512 * 512 + 512) == sum(p.numel() for p in nn.MultiheadAttention(512, 8).parameters())
    shared = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10))
    shared[1].weight = shared[0].weight
    shared[1].bias.requires_grad_(False)
    assert count_parameters(shared) == 40


def test_float32_dropout_and_training_mode_run():
    mha = MultiHeadAttention(16, 4, dropout=0.5).train()
    x = torch.randn(2, 6, 16)
    out, w = mha(x, x, x, causal_mask(6))
    assert out.shape == (2, 6, 16) and w.shape == (2, 4, 6, 6)
    out, _ = fuse(mha)(x, x, x, causal_mask(6))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("kernel_zeroes_it", [True, False], ids=["PyTorch 2.5 on", "older PyTorch"])
def test_fused_attention_gives_a_query_with_every_key_masked_zero_output_like_the_lesson(kernel_zeroes_it, monkeypatch):
    import solutions_lib.fast

    monkeypatch.setattr(solutions_lib.fast, "KERNEL_ZEROES_EMPTY_ROWS", kernel_zeroes_it)
    ours, _ = pair(8, 2, seed=10)
    x = draw(2, 4, 8, 11)
    mask = torch.ones(2, 4, 4, dtype=torch.bool)
    mask[0, 1] = False
    lesson, _ = ours(x, x, x, mask)
    fused, _ = fuse(copy.deepcopy(ours))(x, x, x, mask)
    torch.testing.assert_close(fused, lesson)
