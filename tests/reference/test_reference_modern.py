"""solutions_lib.gpt.modern against independent formulations, computed here: RMSNorm against torch.nn.RMSNorm, the
rotation against course_lib.modern's complex numbers and its relative-position property, newton_schulz against the
update torch.optim.Muon makes and against its polynomial on the singular values, ModernGPT's KV cache and generation,
the parameter split, the fused model and course_lib.modern's VariantGPT with every change."""
import copy
import math

import pytest
import torch
from torch import nn

from course_lib.modern import CHANGES, MuonAdamW, VariantGPT, block_matrices, rotate
from course_lib.training import optimizer_step
from solutions_lib.fast import fuse
from solutions_lib.gpt import KVCache, generate
from solutions_lib.gpt.modern import ModernGPT, RMSNorm, RotaryAttention, apply_rotary, newton_schulz, split_parameters
from test_reference_transformer import draw, weights_for

TINY = dict(d_model=16, h=2, d_ff=32, N=2, block_size=12)
NS = (3.4445, -4.7750, 2.0315)  # newton_schulz's coefficients (a, b, c)


def modern_gpt(V=13, seed=0, dtype=torch.float64, **sizes):
    """A ModernGPT in eval mode with random weights of a trained model's size, N(0, 1 / d_model) (the projections into
    the residual stream too, zero as built), and random gains: every block computes something, every gain matters, and
    greedy decoding does not just repeat the last token."""
    torch.manual_seed(seed)
    model = ModernGPT(V, **(TINY | sizes)).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:  # the RMSNorms' gains
                p.normal_(1.0, 0.5)
            else:
                p.normal_(0.0, model.tok_embed.embedding_dim ** -0.5)
    return model


def ids(*shape, V=13, seed=1):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- RMSNorm


@pytest.mark.parametrize("shape", [(2, 3, 8), (5, 12), (2, 3, 4, 6)], ids=str)
@pytest.mark.parametrize("scale", [1.0, 1e-3])
def test_rms_norm_matches_pytorchs(shape, scale):
    ours, theirs = RMSNorm(shape[-1]).double(), nn.RMSNorm(shape[-1], eps=1e-6, dtype=torch.float64)
    with torch.no_grad():
        ours.weight.normal_(1.0, 0.5)
        theirs.weight.copy_(ours.weight)
    x = (scale * draw(*shape, seed=4)).detach().requires_grad_(True)
    out, ref = ours(x), theirs(x)
    torch.testing.assert_close(out, ref)
    mine = torch.autograd.grad((out * weights_for(out)).sum(), [x, ours.weight])
    pytorch = torch.autograd.grad((ref * weights_for(ref)).sum(), [x, theirs.weight])
    for a, b in zip(mine, pytorch):
        torch.testing.assert_close(a, b)


# ---------------------------------------------------------------- rotary position embeddings


@pytest.mark.parametrize("shape, start", [((2, 3, 5, 8), 0), ((1, 2, 4, 6), 7), ((3, 1, 9, 64), 100)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_apply_rotary_is_a_complex_multiplication(shape, start, dtype):
    x = draw(*shape, seed=5).detach().to(dtype)
    positions = torch.arange(start, start + shape[2])
    out = apply_rotary(x, positions)
    assert out.dtype == dtype
    # in float32 the angles are rounded: positions[t] * theta_i to about 1e-7 of itself
    tolerance = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {}
    torch.testing.assert_close(out, rotate(x, positions), **tolerance)
    anywhere = torch.randint(0, 50, (shape[2],), generator=torch.Generator().manual_seed(start))  # any order, repeats
    torch.testing.assert_close(apply_rotary(x, anywhere, base=500.0), rotate(x, anywhere, base=500.0), **tolerance)


def test_a_rotated_query_and_key_meet_by_their_distance_alone():
    q, k = draw(1, 1, 1, 8, seed=6).detach(), draw(1, 1, 1, 8, seed=7).detach()

    def score(m, n):
        return (apply_rotary(q, torch.tensor([m])) * apply_rotary(k, torch.tensor([n]))).sum()

    for m, n in [(3, 1), (0, 5), (7, 7)]:
        for shift in (1, 10, 250):
            torch.testing.assert_close(score(m + shift, n + shift), score(m, n))
    assert not torch.allclose(score(3, 1), score(1, 3))  # the order of the two matters: m - n, not |m - n|
    torch.testing.assert_close(apply_rotary(q, torch.tensor([0])), q)  # position 0 turns nothing
    torch.testing.assert_close(apply_rotary(q, torch.tensor([9])).norm(), q.norm())  # a rotation keeps lengths


@pytest.mark.parametrize("qk_norm", [True, False])
def test_rotary_attention_without_a_cache_sees_only_relative_positions(qk_norm):
    # so the checks hand RotaryAttention and ModernGPT a cache to tell the positions apart
    torch.manual_seed(8)
    attention = RotaryAttention(12, 3, qk_norm=qk_norm).double()
    x = draw(2, 5, 12, seed=9).detach()
    torch.testing.assert_close(attention(x, torch.arange(5)), attention(x, torch.arange(6, 11)))


# ---------------------------------------------------------------- Muon


def test_newton_schulz_is_the_update_of_pytorchs_muon():
    # torch.optim.Muon: p -= lr * sqrt(max(1, rows / cols)) * NS(the Nesterov update), NS in bfloat16; the first step's
    # update is a multiple of the gradient, and NS does not see its scale
    for m, n in [(16, 48), (48, 16), (24, 24), (8, 20)]:
        g = torch.Generator().manual_seed(m * n)
        p = nn.Parameter(torch.randn(m, n, generator=g))
        p.grad = torch.randn(m, n, generator=g)
        before, lr = p.detach().clone(), 0.1
        torch.optim.Muon([p], lr=lr, weight_decay=0.0).step()
        theirs = (before - p.detach()).double() / (lr * math.sqrt(max(1, m / n)))
        ours = newton_schulz(p.grad.double())
        assert (theirs - ours).norm() < 0.04 * ours.norm(), (m, n)  # bfloat16: measured 0.015 to 0.018
        torch.testing.assert_close(theirs, ours, atol=0.03, rtol=0.05)


@pytest.mark.parametrize("shape", [(6, 20), (20, 6), (12, 12), (1, 7)], ids=str)
@pytest.mark.parametrize("steps", [1, 5, 9])
def test_newton_schulz_maps_each_singular_value_by_its_polynomial(shape, steps):
    G = draw(*shape, seed=10).detach()
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)
    s = S / G.norm()
    a, b, c = NS
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    out = newton_schulz(G, steps)
    torch.testing.assert_close(out, U @ torch.diag(s) @ Vh)  # the singular vectors stay, the values move
    if steps == 5 and min(shape) > 1 and shape[0] != shape[1]:  # no singular value near 0: all land near 1
        assert torch.linalg.svdvals(out).min() > 0.68 and torch.linalg.svdvals(out).max() < 1.14
    assert torch.equal(newton_schulz(torch.zeros(*shape, dtype=torch.float64)), torch.zeros(*shape, dtype=torch.float64))


def test_split_parameters_covers_every_parameter_once_and_gives_muon_the_blocks_matrices():
    for model in [modern_gpt(), VariantGPT(11, d_model=8, h=2, d_ff=16, N=3, block_size=8)]:
        hidden, other = split_parameters(model)
        names = {id(p): name for name, p in model.named_parameters()}
        together = [id(p) for p in hidden + other]
        assert len(together) == len(set(together)) and set(together) == {id(p) for p in model.parameters()}
        assert hidden and all(p.dim() == 2 and names[id(p)].startswith("blocks.") for p in hidden)
        assert not any(p.dim() == 2 and names[id(p)].startswith("blocks.") for p in other)
        assert model.tok_embed.weight in other  # and with it the head, the same tensor
        assert [id(p) for p in hidden] == [id(p) for p in model.parameters() if id(p) in set(map(id, hidden))]
        given = block_matrices(model)  # the split course_lib.modern.MuonAdamW is handed
        assert [list(map(id, ps)) for ps in given] == [list(map(id, ps)) for ps in (hidden, other)]


def test_muon_adamw_steps_under_a_gradient_scaler_and_skips_a_step_that_overflowed():
    # the float16 path of a T4-class GPU (course_lib.training.optimizer_step), run by CPU autocast here: GradScaler
    # unscales and steps MuonAdamW through its param_groups and step alone, and skips both optimizers on an overflow
    model = modern_gpt(seed=21, dtype=torch.float32).train()
    opt = MuonAdamW(*split_parameters(model), lr=1e-3, muon_lr=0.02, weight_decay=0.1)
    idx = ids(2, 8, seed=22)
    for scale, finite in [(2.0 ** 10, True), (1e38, False)]:
        scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        with torch.autocast("cpu", dtype=torch.float16):
            _, loss = model(idx, idx)
        optimizer_step(loss, model, opt, scaler, clip=1.0)
        moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
        if finite:
            assert moved == set(before), f"not updated: {sorted(set(before) - moved)}"
            assert scaler.get_scale() == scale
            assert len(opt.muon.state) == len(opt.muon.param_groups[0]["params"])
            assert all("momentum_buffer" in s for s in opt.muon.state.values())
        else:
            assert not moved, f"updated after an overflow: {sorted(moved)}"
            assert scaler.get_scale() == pytest.approx(scale * 0.5)


# ---------------------------------------------------------------- ModernGPT


def test_modern_gpt_starts_with_every_block_the_identity():
    torch.manual_seed(11)
    model = ModernGPT(13, **TINY).double().eval()
    assert all(not b.attn.W_o.weight.any() and not b.ffn.W_2.weight.any() for b in model.blocks)
    assert model.head.weight is model.tok_embed.weight and not hasattr(model, "pos_embed")
    idx = ids(2, 7)
    logits, _ = model(idx)
    torch.testing.assert_close(logits, model.head(model.norm_f(model.tok_embed(idx))))
    assert 0.015 < model.blocks[0].attn.W_q.weight.std() < 0.025 and 0.015 < model.tok_embed.weight.std() < 0.025


def test_a_kv_cache_fed_in_two_chunks_gives_the_full_recomputation():
    model = modern_gpt(seed=12)
    idx = ids(3, 10, seed=13)
    full, _ = model(idx)
    cache = KVCache(TINY["N"])
    first, _ = model(idx[:, :6], cache=cache)
    second, _ = model(idx[:, 6:], cache=cache)
    torch.testing.assert_close(torch.cat([first, second], dim=1), full)
    assert cache.length == 10
    steps = torch.cat([model(idx[:, t : t + 1], cache=c)[0] for c in [KVCache(TINY["N"])] for t in range(10)], dim=1)
    torch.testing.assert_close(steps, full)


def test_generation_with_and_without_the_cache_gives_the_same_tokens():
    model = modern_gpt(seed=14)
    prompt = ids(2, 3, seed=15)
    within = generate(model, prompt, 8, use_cache=True, temperature=0)  # 11 tokens, within block_size 12
    assert torch.equal(within, generate(model, prompt, 8, use_cache=False, temperature=0))
    beyond = generate(model, prompt, 15, temperature=0)  # past block_size: the last 12 tokens, recomputed
    assert torch.equal(beyond, generate(model, prompt, 15, use_cache=False, temperature=0)) and beyond.shape == (2, 18)
    assert len(set(within[:, 3:].flatten().tolist())) > 2  # the projections are not zero: it does not repeat one token


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_the_fused_model_computes_the_same_logits(dtype):
    model = modern_gpt(seed=16, dtype=dtype)
    fused = fuse(copy.deepcopy(model))
    idx, targets = ids(2, 9, seed=17), ids(2, 9, seed=18)
    (logits, loss), (fused_logits, fused_loss) = model(idx, targets), fused(idx, targets)
    tolerance = {} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-4}
    torch.testing.assert_close(fused_logits, logits, **tolerance)
    torch.testing.assert_close(fused_loss, loss, **tolerance)
    cache = KVCache(TINY["N"])  # with a cache the fused attention is the lesson's
    fused(idx[:, :4], cache=cache)
    torch.testing.assert_close(fused(idx[:, 4:], cache=cache)[0], logits[:, 4:], **tolerance)


def test_variant_gpt_with_every_change_is_modern_gpt():
    model = modern_gpt(seed=19)
    torch.manual_seed(20)
    variant = VariantGPT(13, **TINY, changes=[c for c in CHANGES if c != "muon"]).double().eval()
    variant.load_state_dict({name.replace("ffn.", ""): p for name, p in model.state_dict().items()})
    idx, targets = ids(3, 11, seed=21), ids(3, 11, seed=22)
    logits, loss = model(idx, targets)
    theirs, their_loss = variant(idx, targets)
    torch.testing.assert_close(theirs, logits)
    torch.testing.assert_close(their_loss, loss)
