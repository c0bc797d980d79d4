"""The reference of notebook 04: the sinusoidal encoding against the formula,
the shift matrices, the modules and the permutation experiment."""
import math

import pytest
import torch

from solutions_lib import positional as P
from solutions_lib.attention import SelfAttention


def formula(T, d_model):
    """PE written entry by entry from the paper's definition, with math only."""
    pe = [[0.0] * d_model for _ in range(T)]
    for pos in range(T):
        for j in range(d_model):
            i = j // 2
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos][j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return torch.tensor(pe, dtype=torch.float64)


@pytest.mark.parametrize("T,d_model", [(1, 2), (10, 8), (50, 16), (7, 7), (33, 1), (20, 33), (100, 64)])
def test_sinusoidal_matches_the_formula(T, d_model):
    pe = P.sinusoidal_positional_encoding(T, d_model, dtype=torch.float64)
    assert pe.shape == (T, d_model) and pe.dtype == torch.float64
    torch.testing.assert_close(pe, formula(T, d_model), rtol=0, atol=1e-12)
    assert P.sinusoidal_positional_encoding(T, d_model).dtype == torch.float32


def test_first_position_and_range():
    pe = P.sinusoidal_positional_encoding(500, 32)
    assert pe[0, 0::2].eq(0).all() and pe[0, 1::2].eq(1).all()
    assert pe.abs().max() <= 1


@pytest.mark.parametrize("d_model", [2, 4, 16, 64])
@pytest.mark.parametrize("k", [0, 1, 3, 10, 57, -4])
def test_shift_matrix_shifts_every_position(k, d_model):
    T = 200
    pe = P.sinusoidal_positional_encoding(T + abs(k), d_model, dtype=torch.float64)
    M = P.shift_matrix(k, d_model, dtype=torch.float64)
    start, end = max(0, -k), T + abs(k) - max(0, k)
    torch.testing.assert_close(pe[start:end] @ M, pe[start + k : end + k], rtol=0, atol=1e-10)
    torch.testing.assert_close(M @ M.T, torch.eye(d_model, dtype=torch.float64), rtol=0, atol=1e-12)  # a rotation


def test_shift_matrices_compose():
    M = lambda k: P.shift_matrix(k, 16, dtype=torch.float64)  # noqa: E731
    torch.testing.assert_close(M(3) @ M(4), M(7))
    torch.testing.assert_close(M(5) @ M(-5), torch.eye(16, dtype=torch.float64))


def test_shift_matrix_needs_an_even_width():
    with pytest.raises(ValueError):
        P.shift_matrix(1, 7)


def test_dot_product_depends_on_distance_only():
    pe = P.sinusoidal_positional_encoding(300, 32, dtype=torch.float64)
    for k in [0, 1, 5, 40]:
        dots = (pe[: 300 - k] * pe[k:]).sum(-1)
        torch.testing.assert_close(dots, torch.full_like(dots, dots[0].item()))


def test_positional_encoding_module():
    module = P.PositionalEncoding(12, max_len=30)
    assert "pe" in dict(module.named_buffers()) and not list(module.parameters())
    assert "pe" in module.state_dict()
    x = torch.randn(3, 9, 12, requires_grad=True)
    out = module(x)
    torch.testing.assert_close(out, x + P.sinusoidal_positional_encoding(9, 12))
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x))
    assert module(x.double()).dtype == torch.float64


def test_learned_embedding_adds_one_trained_vector_per_position():
    torch.manual_seed(0)
    module = P.LearnedPositionalEmbedding(max_len=10, d_model=4)
    x = torch.randn(2, 6, 4)
    out = module(x)
    torch.testing.assert_close(out - x, module.embedding.weight[:6].expand(2, 6, 4))
    out.sum().backward()
    grad = module.embedding.weight.grad
    torch.testing.assert_close(grad[:6], torch.full((6, 4), 2.0))
    assert (grad[6:] == 0).all()


def test_permutation_experiment():
    torch.manual_seed(0)
    attn = SelfAttention(8, 8).double()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    with torch.no_grad():
        assert P.permutation_gap(lambda x: attn(x)[0], x, perm) < 1e-12
        pe = P.sinusoidal_positional_encoding(7, 8, dtype=torch.float64)
        assert P.permutation_gap(lambda x: attn(x + pe)[0], x, perm) > 1e-2
        assert P.permutation_gap(lambda x: x.cumsum(1), x, perm) > 1e-2
    assert isinstance(P.permutation_gap(lambda x: x * 2, x, perm), float)
