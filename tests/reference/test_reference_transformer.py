"""solutions_lib's Transformer pieces against PyTorch's modules with copied weights."""
import pytest
import torch
from torch import nn

from solutions_lib.attention import causal_mask, padding_mask
from solutions_lib.multihead import count_parameters
from solutions_lib.transformer import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    Transformer,
    decoder_layer_state_from_pytorch,
    encoder_layer_state_from_pytorch,
    stack_state_from_pytorch,
)

SIZES = [  # B, T_src, T_tgt, d_model, h, d_ff
    (1, 1, 1, 4, 1, 8),
    (2, 5, 4, 8, 2, 16),
    (3, 7, 9, 16, 4, 32),
]


def draw(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)


def weights_for(out):
    return torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)


def assert_same(ours, theirs, inputs):
    torch.testing.assert_close(ours, theirs)
    a = torch.autograd.grad((ours * weights_for(ours)).sum(), inputs, retain_graph=True)
    b = torch.autograd.grad((theirs * weights_for(theirs)).sum(), inputs, retain_graph=True)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)


def lengths(B, T, seed):
    return torch.randint(1, T + 1, (B,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 16), (2, 3, 4, 6)], ids=str)
def test_layer_norm_matches_pytorch(shape):
    torch.manual_seed(0)
    theirs = nn.LayerNorm(shape[-1], dtype=torch.float64)
    nn.init.normal_(theirs.weight), nn.init.normal_(theirs.bias)
    ours = LayerNorm(shape[-1]).double()
    ours.load_state_dict({"gamma": theirs.weight.detach(), "beta": theirs.bias.detach()})
    x = draw(*shape, seed=1)
    assert_same(ours(x), theirs(x), [x])
    small = (0.01 * x).detach().requires_grad_()  # variance near eps: eps must sit inside the square root
    assert_same(ours(small), theirs(small), [small])


def test_feed_forward_is_relu_between_two_linears():
    ff = FeedForward(8, 32, dropout=0.0).double()
    x = draw(2, 3, 8, seed=2)
    expected = ff.W_2(torch.relu(ff.W_1(x)))
    torch.testing.assert_close(ff(x), expected)


def torch_encoder_layer(d_model, h, d_ff, seed):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(d_model, h, d_ff, dropout=0.0, batch_first=True, dtype=torch.float64).eval()
    for norm in (layer.norm1, layer.norm2):  # make the norms' affine part matter
        nn.init.normal_(norm.weight), nn.init.normal_(norm.bias)
    return layer


@pytest.mark.parametrize("size", SIZES, ids=str)
def test_encoder_layer_matches_pytorch(size):
    B, T, _, d_model, h, d_ff = size
    theirs = torch_encoder_layer(d_model, h, d_ff, seed=3)
    ours = EncoderLayer(d_model, h, d_ff, dropout=0.0).double().eval()
    ours.load_state_dict(encoder_layer_state_from_pytorch(theirs))
    x = draw(B, T, d_model, seed=4)
    assert_same(ours(x), theirs(x), [x])
    allowed = padding_mask(lengths(B, T, 5), T)
    assert_same(ours(x, allowed), theirs(x, src_key_padding_mask=~allowed.squeeze(1)), [x])
    # parameter gradients, through the matching names
    out, ref = ours(x, allowed), theirs(x, src_key_padding_mask=~allowed.squeeze(1))
    g_ours = torch.autograd.grad((out * weights_for(out)).sum(), [ours.ffn.W_1.weight, ours.norm2.gamma, ours.self_attn.W_o.weight])
    g_theirs = torch.autograd.grad((ref * weights_for(ref)).sum(), [theirs.linear1.weight, theirs.norm2.weight, theirs.self_attn.out_proj.weight])
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("size", SIZES, ids=str)
def test_decoder_layer_matches_pytorch(size):
    B, T_src, T_tgt, d_model, h, d_ff = size
    torch.manual_seed(6)
    theirs = nn.TransformerDecoderLayer(d_model, h, d_ff, dropout=0.0, batch_first=True, dtype=torch.float64).eval()
    for norm in (theirs.norm1, theirs.norm2, theirs.norm3):
        nn.init.normal_(norm.weight), nn.init.normal_(norm.bias)
    ours = DecoderLayer(d_model, h, d_ff, dropout=0.0).double().eval()
    ours.load_state_dict(decoder_layer_state_from_pytorch(theirs))
    x, memory = draw(B, T_tgt, d_model, seed=7), draw(B, T_src, d_model, seed=8)
    src_allowed = padding_mask(lengths(B, T_src, 9), T_src)
    out = ours(x, memory, src_allowed, causal_mask(T_tgt))
    ref = theirs(x, memory, tgt_mask=~causal_mask(T_tgt), memory_key_padding_mask=~src_allowed.squeeze(1))
    assert_same(out, ref, [x, memory])
    g_ours = torch.autograd.grad((out * weights_for(out)).sum(), [ours.cross_attn.W_o.weight, ours.norm3.beta])
    g_theirs = torch.autograd.grad((ref * weights_for(ref)).sum(), [theirs.multihead_attn.out_proj.weight, theirs.norm3.bias])
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("N", [1, 3])
def test_stacks_match_nn_transformer_without_its_final_norms(N):
    B, T_src, T_tgt, d_model, h, d_ff = 2, 6, 5, 16, 4, 32
    torch.manual_seed(10)
    theirs = nn.Transformer(d_model, h, N, N, d_ff, dropout=0.0, batch_first=True, dtype=torch.float64).eval()
    theirs.encoder.norm = theirs.decoder.norm = None  # the paper's post-norm stacks end without one
    encoder = Encoder(d_model, h, d_ff, N, dropout=0.0).double().eval()
    decoder = Decoder(d_model, h, d_ff, N, dropout=0.0).double().eval()
    state = stack_state_from_pytorch(theirs)
    encoder.load_state_dict({k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")})
    decoder.load_state_dict({k[len("decoder."):]: v for k, v in state.items() if k.startswith("decoder.")})
    src, tgt = draw(B, T_src, d_model, seed=11), draw(B, T_tgt, d_model, seed=12)
    src_allowed = padding_mask(lengths(B, T_src, 13), T_src)
    tgt_allowed = causal_mask(T_tgt) & padding_mask(torch.tensor([T_tgt, 3]), T_tgt)
    out = decoder(tgt, encoder(src, src_allowed), src_allowed, tgt_allowed)
    ref = theirs(src, tgt, tgt_mask=~causal_mask(T_tgt), src_key_padding_mask=~src_allowed.squeeze(1),
                 memory_key_padding_mask=~src_allowed.squeeze(1), tgt_key_padding_mask=~padding_mask(torch.tensor([T_tgt, 3]), T_tgt).squeeze(1))
    assert_same(out, ref, [src, tgt])


def test_transformer_matches_nn_transformer_with_the_same_embeddings():
    src_vocab, tgt_vocab, d_model, h, N, d_ff = 11, 13, 16, 4, 2, 32
    torch.manual_seed(14)
    ours = Transformer(src_vocab, tgt_vocab, d_model=d_model, h=h, d_ff=d_ff, N=N, dropout=0.0, max_len=20).double().eval()
    theirs = nn.Transformer(d_model, h, N, N, d_ff, dropout=0.0, batch_first=True, dtype=torch.float64).eval()
    theirs.encoder.norm = theirs.decoder.norm = None
    ours.load_state_dict(stack_state_from_pytorch(theirs) | {k: v for k, v in ours.state_dict().items() if not k.startswith(("encoder.", "decoder."))})
    src = torch.randint(0, src_vocab, (3, 7), generator=torch.Generator().manual_seed(15))
    tgt = torch.randint(0, tgt_vocab, (3, 5), generator=torch.Generator().manual_seed(16))
    src_allowed = padding_mask(torch.tensor([7, 4, 2]), 7)
    logits = ours(src, tgt, src_allowed)
    assert logits.shape == (3, 5, tgt_vocab)

    def embed(table, tokens):
        return table(tokens) * d_model ** 0.5 + ours.pe[: tokens.size(1)]

    hidden = theirs(embed(ours.src_embed, src), embed(ours.tgt_embed, tgt), tgt_mask=~causal_mask(5),
                    src_key_padding_mask=~src_allowed.squeeze(1), memory_key_padding_mask=~src_allowed.squeeze(1))
    torch.testing.assert_close(logits, ours.out(hidden))
    torch.testing.assert_close(ours.decode(ours.encode(src, src_allowed), tgt, src_allowed), logits)


def test_decoder_output_at_a_position_ignores_later_target_tokens():
    torch.manual_seed(17)
    model = Transformer(10, 10, d_model=16, h=2, d_ff=32, N=2, dropout=0.0).eval()
    src = torch.randint(0, 10, (2, 6))
    tgt = torch.randint(0, 10, (2, 5))
    changed = tgt.clone()
    changed[:, 3:] = (changed[:, 3:] + 1) % 10
    torch.testing.assert_close(model(src, tgt)[:, :3], model(src, changed)[:, :3])


def test_weight_sharing_and_the_base_model_parameter_count():
    with torch.device("meta"):
        base = Transformer(37000, 37000, d_model=512, h=8, N=6, d_ff=2048, share_embeddings=True)
    layer_enc = 4 * (512 * 512 + 512) + (512 * 2048 + 2048 + 2048 * 512 + 512) + 2 * 2 * 512
    layer_dec = 8 * (512 * 512 + 512) + (512 * 2048 + 2048 + 2048 * 512 + 512) + 3 * 2 * 512
    assert count_parameters(base) == 37000 * 512 + 6 * (layer_enc + layer_dec) + 37000
    assert base.out.weight is base.tgt_embed.weight is base.src_embed.weight
    tied = Transformer(20, 30, d_model=16, h=2, d_ff=32, N=1, tie_weights=True)
    assert tied.out.weight is tied.tgt_embed.weight and tied.src_embed is not tied.tgt_embed


def test_fused_layer_norm_equals_the_formula():
    import copy

    from solutions_lib.fast import fuse

    ln = LayerNorm(8).double()
    with torch.no_grad():
        ln.gamma.normal_(), ln.beta.normal_()
    x = draw(3, 4, 8, seed=20)
    fused = fuse(copy.deepcopy(ln))
    assert type(fused).__name__ == "FusedLayerNorm"
    assert_same(fused(x), ln(x), [x])


def fused_pair(seed, dropout=0.0):
    """The lesson's Transformer (float64) and a fused copy with the same weights."""
    import copy

    from solutions_lib.fast import fuse

    torch.manual_seed(seed)
    lesson = Transformer(12, 12, d_model=16, h=4, d_ff=32, N=2, dropout=dropout).double()
    return lesson, fuse(copy.deepcopy(lesson))


def padded_batch(seed):
    """Sources of lengths 9, 4, 1, 7 padded to 9, targets of 6; the masks of make_masks."""
    from solutions_lib.training import make_masks

    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 12, (4, 9), generator=g) * padding_mask(torch.tensor([9, 4, 1, 7]), 9).squeeze(1)
    tgt_in = torch.randint(3, 12, (4, 6), generator=g)
    return (src, tgt_in, *make_masks(src, tgt_in))


def test_fused_transformer_skips_the_padding_with_the_lessons_logits_and_gradients():
    lesson, fused = fused_pair(seed=21)
    src, tgt_in, src_mask, tgt_mask = padded_batch(seed=22)
    memory = fused.encode(src, src_mask)
    assert type(fused.encoder).__name__ == "FusedEncoder"
    assert torch.all(memory[~src_mask.squeeze(1)] == 0), "the packed path did not run"
    torch.testing.assert_close(memory[src_mask.squeeze(1)], lesson.encode(src, src_mask)[src_mask.squeeze(1)])
    ours, theirs = fused(src, tgt_in, src_mask, tgt_mask), lesson(src, tgt_in, src_mask, tgt_mask)
    torch.testing.assert_close(ours, theirs)
    (ours * weights_for(ours)).sum().backward()
    (theirs * weights_for(theirs)).sum().backward()
    for (name, a), b in zip(fused.named_parameters(), lesson.parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("mask", ["none", "per query"])
def test_fused_encoder_runs_as_the_lesson_for_masks_other_than_padding(mask):
    lesson, fused = fused_pair(seed=23)
    src, _, src_mask, _ = padded_batch(seed=24)
    mask = None if mask == "none" else src_mask & causal_mask(9)  # (B, T, T): not one row for every query
    torch.testing.assert_close(fused.encode(src, mask), lesson.encode(src, mask))


def test_fused_encoder_with_dropout_trains_and_evaluates_like_the_lesson():
    lesson, fused = fused_pair(seed=25, dropout=0.3)
    src, tgt_in, src_mask, tgt_mask = padded_batch(seed=26)
    out = fused.train()(src, tgt_in, src_mask, tgt_mask)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in fused.parameters() if p.grad is not None)
    torch.testing.assert_close(fused.eval()(src, tgt_in, src_mask, tgt_mask), lesson.eval()(src, tgt_in, src_mask, tgt_mask))
