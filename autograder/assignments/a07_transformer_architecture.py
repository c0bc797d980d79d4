"""Checks for notebook 07: the encoder-decoder Transformer.

Each known mistake is an edit of the reference's class (autograder.mutants), so it
keeps the reference's submodules and parameter names and the reference's weights load.
"""
import dataclasses

import torch

import solutions_lib as sl
from solutions_lib import transformer as tf
from autograder.checks.cases import Call, Case, Exercise
from autograder.inputs import Draw, dims, on_the_meta_device, with_random_norms

NOTEBOOK = "07_transformer_architecture"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


# ---------------------------------------------------------------- LayerNorm


def _ln_case(seed, shape, scale=1.0, dtype=torch.float32, hidden=False):
    def make():
        return Call((scale * Draw(seed).randn(*shape, dtype=dtype),), init=(shape[-1],))

    label = f"x {tuple(shape)}" + ("" if scale == 1.0 else f", entries of size {scale:g}") + _dtype_label(dtype)
    return Case(label, make, hidden=hidden)


def ln_cases():
    return [
        _ln_case(1, (2, 5, 8)), _ln_case(2, (3, 4, 6), scale=0.01), _ln_case(3, (1, 3, 16), dtype=torch.float64),
        _ln_case(4, (4, 7, 12), scale=0.01, dtype=torch.float64, hidden=True),
    ]


# ---------------------------------------------------------------- FeedForward


def _dropout_label(dropout):
    return f", dropout={dropout} in training mode"


def _ff_case(seed, B, T, d_model, d_ff, dtype=torch.float32, dropout=None, hidden=False):
    """dropout: the module's rate, run in training mode right after torch.manual_seed(seed) (Call.seed: the
    reference and the learner draw the same masks), the part "dropout"; None: eval mode, the default rate."""
    def make():
        x = Draw(seed).randn(B, T, d_model, dtype=dtype)
        if dropout is None:
            return Call((x,), init=(d_model, d_ff))
        return Call((x,), init=(d_model, d_ff, dropout), seed=seed, train=True)

    label = dims(B=B, T=T, d_model=d_model, d_ff=d_ff) + _dtype_label(dtype)
    if dropout is not None:
        return Case(label + _dropout_label(dropout), make, part="dropout", hidden=hidden)
    return Case(label, make, hidden=hidden)


def ff_cases():
    return [
        _ff_case(11, 2, 5, 8, 32), _ff_case(12, 1, 3, 6, 24), _ff_case(13, 3, 4, 12, 48, hidden=True),
        _ff_case(14, 2, 4, 8, 32, dropout=0.5), _ff_case(15, 3, 3, 6, 24, dropout=0.3, hidden=True),
    ]

# ---------------------------------------------------------------- layers and stacks

EMPTY_ROWS = "padded queries see no key"


def _queries(lengths, T):
    """(B, T, 1): True at the real query positions; & with a mask, the padded queries see no key."""
    return sl.padding_mask(lengths, T).transpose(1, 2)


def _layer_case(seed, kind, B, T_src, T_tgt, d_model, h, d_ff, N=None, masks=False, part="no mask", dtype=torch.float32,
                dropout=None, hidden=False):
    """masks: False, True (a source padding mask) or EMPTY_ROWS (padded queries, source and target, see no key);
    dropout: the rate, run in training mode right after torch.manual_seed(seed) (Call.seed), in the part "dropout"."""
    def make():
        r = Draw(seed)
        init = (d_model, h, d_ff) if N is None else (d_model, h, d_ff, N)
        if dropout is not None:
            return dataclasses.replace(made(r, init + (dropout,)), seed=seed, train=True)
        return made(r, init)

    def made(r, init):
        src = r.randn(B, T_src, d_model, dtype=dtype)
        lengths = r.integers(1, T_src + 1, B)
        lengths[0], lengths[-1] = 1, T_src
        src_mask = sl.padding_mask(lengths, T_src) if masks else None
        if kind == "encoder":
            if masks == EMPTY_ROWS:
                src_mask = src_mask & _queries(lengths, T_src)
            return Call((src,), {"mask": src_mask} if masks else {}, init=init)
        x = r.randn(B, T_tgt, d_model, dtype=dtype)
        tgt_mask = sl.causal_mask(T_tgt)
        if masks == EMPTY_ROWS:
            tgt_lengths = r.integers(1, T_tgt + 1, B)
            tgt_lengths[0] = 1
            src_mask = src_mask & _queries(tgt_lengths, T_tgt)
            tgt_mask = tgt_mask & _queries(tgt_lengths, T_tgt)
        if masks:
            return Call((x, src), {"src_mask": src_mask, "tgt_mask": tgt_mask}, init=init)
        return Call((x, src), {"tgt_mask": tgt_mask}, init=init)

    sizes = dict(B=B) | (dict(T=T_src) if kind == "encoder" else dict(T_tgt=T_tgt, T_src=T_src)) | dict(d_model=d_model, h=h, d_ff=d_ff)
    sizes |= {} if N is None else dict(N=N)
    extra = "" if kind == "encoder" else ", causal tgt_mask"
    says = {False: "", True: ", source padding mask"}.get(masks, ", padding masks under which padded queries see no key")
    label = dims(**sizes) + extra + says + _dtype_label(dtype)
    if dropout is not None:
        return Case(label + _dropout_label(dropout), make, part="dropout", hidden=hidden)
    return Case(label, make, part=part, hidden=hidden)


def encoder_layer_cases():
    return [
        _layer_case(21, "encoder", 2, 5, None, 8, 2, 16), _layer_case(22, "encoder", 1, 3, None, 12, 3, 24),
        _layer_case(23, "encoder", 3, 6, None, 8, 2, 16, masks=True, part="padding mask"),
        _layer_case(24, "encoder", 2, 7, None, 16, 4, 32, masks=True, part="padding mask", hidden=True),
        _layer_case(25, "encoder", 2, 4, None, 12, 3, 24, hidden=True),
        _layer_case(26, "encoder", 3, 5, None, 8, 2, 16, masks=EMPTY_ROWS, part="padding mask"),
        _layer_case(27, "encoder", 2, 6, None, 12, 3, 24, masks=EMPTY_ROWS, part="padding mask", hidden=True),
        _layer_case(28, "encoder", 2, 5, None, 8, 2, 16, masks=True, dropout=0.3),
        _layer_case(29, "encoder", 3, 4, None, 12, 3, 24, dropout=0.2, hidden=True),
    ]


def encoder_cases():
    return [
        _layer_case(31, "encoder", 2, 5, None, 8, 2, 16, N=2),
        _layer_case(32, "encoder", 3, 6, None, 8, 2, 16, N=3, masks=True, part="padding mask"),
        _layer_case(33, "encoder", 2, 4, None, 12, 3, 24, N=2, masks=True, part="padding mask", hidden=True),
        _layer_case(34, "encoder", 2, 3, None, 8, 2, 16, N=2, hidden=True),
        _layer_case(35, "encoder", 3, 5, None, 8, 2, 16, N=2, masks=EMPTY_ROWS, part="padding mask"),
        _layer_case(36, "encoder", 2, 6, None, 12, 3, 24, N=2, masks=EMPTY_ROWS, part="padding mask", hidden=True),
        _layer_case(37, "encoder", 2, 5, None, 8, 2, 16, N=2, masks=True, dropout=0.3),
        _layer_case(38, "encoder", 3, 4, None, 12, 3, 24, N=2, dropout=0.2, hidden=True),
    ]


def decoder_layer_cases():
    return [
        _layer_case(41, "decoder", 2, 6, 4, 8, 2, 16), _layer_case(42, "decoder", 1, 3, 5, 12, 3, 24),
        _layer_case(43, "decoder", 3, 6, 5, 8, 2, 16, masks=True, part="padding mask"),
        _layer_case(44, "decoder", 2, 7, 3, 16, 4, 32, masks=True, part="padding mask", hidden=True),
        _layer_case(45, "decoder", 2, 5, 3, 12, 3, 24, hidden=True),
        _layer_case(46, "decoder", 3, 5, 4, 8, 2, 16, masks=EMPTY_ROWS, part="padding mask"),
        _layer_case(47, "decoder", 2, 6, 5, 12, 3, 24, masks=EMPTY_ROWS, part="padding mask", hidden=True),
        _layer_case(48, "decoder", 2, 5, 4, 8, 2, 16, masks=True, dropout=0.3),
        _layer_case(49, "decoder", 3, 4, 5, 12, 3, 24, dropout=0.2, hidden=True),
    ]


def decoder_cases():
    return [
        _layer_case(51, "decoder", 2, 6, 4, 8, 2, 16, N=2),
        _layer_case(52, "decoder", 3, 5, 6, 8, 2, 16, N=3, masks=True, part="padding mask"),
        _layer_case(53, "decoder", 2, 4, 5, 12, 3, 24, N=2, masks=True, part="padding mask", hidden=True),
        _layer_case(54, "decoder", 2, 3, 4, 8, 2, 16, N=2, hidden=True),
        _layer_case(55, "decoder", 3, 5, 4, 8, 2, 16, N=2, masks=EMPTY_ROWS, part="padding mask"),
        _layer_case(56, "decoder", 2, 6, 5, 12, 3, 24, N=2, masks=EMPTY_ROWS, part="padding mask", hidden=True),
        _layer_case(57, "decoder", 2, 5, 4, 8, 2, 16, N=2, masks=True, dropout=0.3),
        _layer_case(58, "decoder", 3, 4, 5, 12, 3, 24, N=2, dropout=0.2, hidden=True),
    ]


def _transformer_case(seed, B, T_src, T_tgt, src_vocab, tgt_vocab, d_model, h, N, d_ff, masks=False, tie=False, part="no mask",
                      dropout=None, hidden=False):
    """dropout: the rate, run in training mode right after torch.manual_seed(seed) (Call.seed), in the part "dropout";
    None: dropout=0.1 in eval mode."""
    def make():
        call = made()
        return call if dropout is None else dataclasses.replace(call, seed=seed, train=True)

    def made():
        r = Draw(seed)
        src, tgt = r.integers(0, src_vocab, B, T_src), r.integers(0, tgt_vocab, B, T_tgt)
        rate = 0.1 if dropout is None else dropout
        init, sizes = (src_vocab, tgt_vocab), dict(d_model=d_model, h=h, d_ff=d_ff, N=N, dropout=rate, max_len=32, tie_weights=tie)
        if not masks:
            return Call((src, tgt), init=init, init_kwargs=sizes)
        lengths = r.integers(1, T_src + 1, B)
        lengths[0], lengths[-1] = 1, T_src
        tgt_lengths = r.integers(1, T_tgt + 1, B)
        tgt_mask = sl.padding_mask(tgt_lengths, T_tgt)
        if masks == EMPTY_ROWS:
            tgt_lengths[0] = 1
            tgt_mask = sl.padding_mask(tgt_lengths, T_tgt) & _queries(tgt_lengths, T_tgt)
        return Call((src, tgt), {"src_mask": sl.padding_mask(lengths, T_src), "tgt_mask": tgt_mask}, init=init, init_kwargs=sizes)

    label = dims(B=B, T_src=T_src, T_tgt=T_tgt, src_vocab=src_vocab, tgt_vocab=tgt_vocab, d_model=d_model, h=h, N=N, d_ff=d_ff)
    says = {False: "", True: ", padding masks"}.get(masks, ", padding masks, padded target queries see no key")
    label += says + (", tie_weights=True" if tie else "")
    if dropout is not None:
        return Case(label + _dropout_label(dropout), make, part="dropout", hidden=hidden)
    return Case(label, make, part=part, hidden=hidden)


def transformer_cases():
    return [
        _transformer_case(61, 2, 5, 4, 11, 13, 8, 2, 1, 16),
        _transformer_case(62, 3, 6, 5, 9, 7, 8, 2, 2, 16, masks=True, part="padding masks"),
        _transformer_case(63, 2, 4, 6, 10, 10, 8, 2, 1, 16, tie=True, part="tied weights"),
        _transformer_case(64, 2, 7, 6, 12, 9, 12, 3, 2, 24, masks=True, part="padding masks", hidden=True),
        _transformer_case(65, 2, 6, 5, 10, 11, 8, 2, 2, 16, hidden=True),
        _transformer_case(66, 2, 5, 4, 9, 9, 12, 3, 1, 24, tie=True, part="tied weights", hidden=True),
        _transformer_case(67, 3, 5, 5, 10, 8, 8, 2, 1, 16, masks=EMPTY_ROWS, part="padding masks"),
        _transformer_case(68, 2, 6, 6, 9, 11, 12, 3, 2, 24, masks=EMPTY_ROWS, part="padding masks", hidden=True),
        _transformer_case(69, 2, 5, 4, 11, 13, 8, 2, 1, 16, masks=True, dropout=0.3),
        _transformer_case(70, 3, 4, 5, 9, 9, 12, 3, 1, 24, dropout=0.2, hidden=True),
        on_the_meta_device(_transformer_case(71, 2, 5, 4, 11, 13, 8, 2, 1, 16)),
        on_the_meta_device(_transformer_case(72, 3, 4, 6, 9, 10, 12, 3, 2, 24), hidden=True),
    ]


# ---------------------------------------------------------------- the exercises


def _layer_or_stack(name, points, cases, depends_on):
    """The exercise of a layer or a stack of them: checked without and with a source padding mask, and in training
    mode with dropout."""
    return Exercise(name, with_random_norms(getattr(tf, name)), points=points, cases=cases, kind="module",
                    parts={"no mask": 2, "padding mask": 1, "dropout": 0.5}, depends_on=depends_on)


EXERCISES = [
    Exercise("LayerNorm", with_random_norms(tf.LayerNorm), points=2, cases=ln_cases, kind="module"),
    Exercise("FeedForward", tf.FeedForward, points=1, cases=ff_cases, kind="module", parts={"main": 3, "dropout": 1}),
    _layer_or_stack("EncoderLayer", 3, encoder_layer_cases, depends_on=("LayerNorm", "FeedForward")),
    _layer_or_stack("Encoder", 2, encoder_cases, depends_on=("EncoderLayer",)),
    _layer_or_stack("DecoderLayer", 3, decoder_layer_cases, depends_on=("LayerNorm", "FeedForward")),
    _layer_or_stack("Decoder", 2, decoder_cases, depends_on=("DecoderLayer",)),
    Exercise(
        "Transformer", with_random_norms(tf.Transformer), points=4, cases=transformer_cases, kind="module",
        parts={"no mask": 2, "padding masks": 1, "tied weights": 1, "dropout": 0.5, "device": 0.5}, depends_on=("Encoder", "Decoder"),
    ),
]

DEMO_MISTAKES = [("LayerNorm", "unbiased"), ("DecoderLayer", "cross_uses_decoder_keys")]
