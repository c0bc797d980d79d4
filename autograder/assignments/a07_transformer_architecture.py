"""Checks for notebook 07: the encoder-decoder Transformer.

Each known mistake is an edit of the reference's class (autograder.mutants), so it
keeps the reference's submodules and parameter names and the reference's weights load.
"""
import torch

import solutions_lib as sl
from solutions_lib import transformer as tf
from autograder.core import Call, Case, Exercise, Mistake
from autograder.inputs import Draw, dims
from autograder.mutants import swap

NOTEBOOK = "07_transformer_architecture"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


def _with_random_norms(cls):
    """A reference factory whose LayerNorms get random gamma and beta, so that mistakes in them show."""

    def build(*init, **sizes):
        module = cls(*init, **sizes)
        with torch.no_grad():
            for m in module.modules():
                if isinstance(m, tf.LayerNorm):
                    m.gamma.normal_(1.0, 0.5)
                    m.beta.normal_(0.0, 0.5)
        return module

    build.__name__ = build.__qualname__ = cls.__name__
    build.__wrapped__ = cls  # a catalog's edit applies to the class itself
    return build


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


def _ff_case(seed, B, T, d_model, d_ff, dtype=torch.float32, hidden=False):
    def make():
        return Call((Draw(seed).randn(B, T, d_model, dtype=dtype),), init=(d_model, d_ff))

    return Case(dims(B=B, T=T, d_model=d_model, d_ff=d_ff) + _dtype_label(dtype), make, hidden=hidden)


def ff_cases():
    return [_ff_case(11, 2, 5, 8, 32), _ff_case(12, 1, 3, 6, 24), _ff_case(13, 3, 4, 12, 48, hidden=True)]

# ---------------------------------------------------------------- layers and stacks

EMPTY_ROWS = "padded queries see no key"


def _queries(lengths, T):
    """(B, T, 1): True at the real query positions; & with a mask, the padded queries see no key."""
    return sl.padding_mask(lengths, T).transpose(1, 2)


def _layer_case(seed, kind, B, T_src, T_tgt, d_model, h, d_ff, N=None, masks=False, part="no mask", dtype=torch.float32, hidden=False):
    """masks: False, True (a source padding mask) or EMPTY_ROWS (padded queries, source and target, see no key)."""
    def make():
        r = Draw(seed)
        init = (d_model, h, d_ff) if N is None else (d_model, h, d_ff, N)
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
    return Case(label, make, part=part, hidden=hidden)


def encoder_layer_cases():
    return [
        _layer_case(21, "encoder", 2, 5, None, 8, 2, 16), _layer_case(22, "encoder", 1, 3, None, 12, 3, 24),
        _layer_case(23, "encoder", 3, 6, None, 8, 2, 16, masks=True, part="padding mask"),
        _layer_case(24, "encoder", 2, 7, None, 16, 4, 32, masks=True, part="padding mask", hidden=True),
        _layer_case(25, "encoder", 2, 4, None, 12, 3, 24, hidden=True),
        _layer_case(26, "encoder", 3, 5, None, 8, 2, 16, masks=EMPTY_ROWS, part="padding mask"),
        _layer_case(27, "encoder", 2, 6, None, 12, 3, 24, masks=EMPTY_ROWS, part="padding mask", hidden=True),
    ]


def encoder_cases():
    return [
        _layer_case(31, "encoder", 2, 5, None, 8, 2, 16, N=2),
        _layer_case(32, "encoder", 3, 6, None, 8, 2, 16, N=3, masks=True, part="padding mask"),
        _layer_case(33, "encoder", 2, 4, None, 12, 3, 24, N=2, masks=True, part="padding mask", hidden=True),
        _layer_case(34, "encoder", 2, 3, None, 8, 2, 16, N=2, hidden=True),
        _layer_case(35, "encoder", 3, 5, None, 8, 2, 16, N=2, masks=EMPTY_ROWS, part="padding mask"),
        _layer_case(36, "encoder", 2, 6, None, 12, 3, 24, N=2, masks=EMPTY_ROWS, part="padding mask", hidden=True),
    ]


def decoder_layer_cases():
    return [
        _layer_case(41, "decoder", 2, 6, 4, 8, 2, 16), _layer_case(42, "decoder", 1, 3, 5, 12, 3, 24),
        _layer_case(43, "decoder", 3, 6, 5, 8, 2, 16, masks=True, part="padding mask"),
        _layer_case(44, "decoder", 2, 7, 3, 16, 4, 32, masks=True, part="padding mask", hidden=True),
        _layer_case(45, "decoder", 2, 5, 3, 12, 3, 24, hidden=True),
        _layer_case(46, "decoder", 3, 5, 4, 8, 2, 16, masks=EMPTY_ROWS, part="padding mask"),
        _layer_case(47, "decoder", 2, 6, 5, 12, 3, 24, masks=EMPTY_ROWS, part="padding mask", hidden=True),
    ]


def decoder_cases():
    return [
        _layer_case(51, "decoder", 2, 6, 4, 8, 2, 16, N=2),
        _layer_case(52, "decoder", 3, 5, 6, 8, 2, 16, N=3, masks=True, part="padding mask"),
        _layer_case(53, "decoder", 2, 4, 5, 12, 3, 24, N=2, masks=True, part="padding mask", hidden=True),
        _layer_case(54, "decoder", 2, 3, 4, 8, 2, 16, N=2, hidden=True),
        _layer_case(55, "decoder", 3, 5, 4, 8, 2, 16, N=2, masks=EMPTY_ROWS, part="padding mask"),
        _layer_case(56, "decoder", 2, 6, 5, 12, 3, 24, N=2, masks=EMPTY_ROWS, part="padding mask", hidden=True),
    ]


def _transformer_case(seed, B, T_src, T_tgt, src_vocab, tgt_vocab, d_model, h, N, d_ff, masks=False, tie=False, part="no mask", hidden=False):
    def make():
        r = Draw(seed)
        src, tgt = r.integers(0, src_vocab, B, T_src), r.integers(0, tgt_vocab, B, T_tgt)
        init, sizes = (src_vocab, tgt_vocab), dict(d_model=d_model, h=h, d_ff=d_ff, N=N, dropout=0.1, max_len=32, tie_weights=tie)
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
    ]


# ---------------------------------------------------------------- the catalog

AFTER_NORM = "the residual goes inside the norm, LayerNorm(x + Sublayer(x)); you added it after the norm."
SAME_LAYER = "[layer] * N repeats one layer object N times, so all layers share weights; build N separate layers."
FFN = "self.W_2(self.dropout(torch.relu(self.W_1(x))))"
CROSS = "self.cross_attn(x, memory, memory, src_mask)"
ADD_NORM_2 = "x = self.norm2(x + self.dropout(attended))"


def _residual_after_norm(last):
    """x = x + norm(Sublayer(x)) for every sublayer; norm `last` is the feed-forward network's."""
    edit = swap("x = self.norm1(x + self.dropout(attended))", "x = x + self.norm1(self.dropout(attended))")
    if last == 3:
        edit &= swap(ADD_NORM_2, "x = x + self.norm2(self.dropout(attended))")
    return edit & swap(f"return self.norm{last}(x + self.dropout(self.ffn(x)))", f"return x + self.norm{last}(self.dropout(self.ffn(x)))")


def _same_layer(layer):
    return swap(f"nn.ModuleList({layer}(d_model, h, d_ff, dropout) for _ in range(N))", f"nn.ModuleList([{layer}(d_model, h, d_ff, dropout)] * N)")


def _not_chained(call):
    return swap(f"x = {call}\n        return x", f"out = {call}\n        return out")


def _layer_or_stack(name, points, cases, depends_on, mistakes):
    """The exercise of a layer or a stack of them: checked without and with a source padding mask."""
    return Exercise(name, _with_random_norms(getattr(tf, name)), points=points, cases=cases, kind="module",
                    parts={"no mask": 2, "padding mask": 1}, depends_on=depends_on, mistakes=mistakes)


EXERCISES = [
    Exercise("LayerNorm", _with_random_norms(tf.LayerNorm), points=2, cases=ln_cases, kind="module", mistakes=[
        Mistake("eps_outside_sqrt", "eps belongs inside the square root, sqrt(var + eps); outside it changes the result when the variance is small.", swap("torch.sqrt(var + self.eps)", "(torch.sqrt(var) + self.eps)")),
        Mistake("unbiased", "use the biased variance (divide by d_model): x.var(dim=-1, unbiased=False).", swap(", unbiased=False", "")),
        Mistake("over_batch", "you normalised over the batch (like BatchNorm); LayerNorm normalises each token vector over its own d_model features, dim=-1.", swap("dim=-1", "dim=(0, 1)", every=True)),
        Mistake("over_time_too", "you normalised over time and features together; take the mean and variance over the last axis only, one token at a time.", swap("dim=-1", "dim=(-2, -1)", every=True)),
        Mistake("no_affine", "after normalising, scale by gamma and shift by beta.", swap("self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta", "(x - mean) / torch.sqrt(var + self.eps)")),
    ]),
    Exercise("FeedForward", tf.FeedForward, points=1, cases=ff_cases, kind="module", mistakes=[
        Mistake("no_relu", "without the ReLU between W_1 and W_2 the two layers collapse into one linear map.", swap("torch.relu(self.W_1(x))", "self.W_1(x)")),
        Mistake("relu_at_the_end", "the ReLU goes between W_1 and W_2 only; the output of W_2 is not passed through it.", swap(FFN, f"torch.relu({FFN})")),
        Mistake("gelu", "the paper's feed-forward network uses ReLU, not GELU.", swap("torch.relu", "nn.functional.gelu")),
    ]),
    _layer_or_stack("EncoderLayer", 3, encoder_layer_cases, depends_on=("LayerNorm", "FeedForward"), mistakes=[
        Mistake("residual_after_norm", AFTER_NORM, _residual_after_norm(last=2)),
        Mistake("pre_norm", "you normalised before each sublayer (pre-norm); this course follows the paper: x = LayerNorm(x + Sublayer(x)).",
                swap("self.self_attn(x, x, x, mask)", "self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask)")
                & swap("x = self.norm1(x + self.dropout(attended))", "x = x + self.dropout(attended)")
                & swap("return self.norm2(x + self.dropout(self.ffn(x)))", "return x + self.dropout(self.ffn(self.norm2(x)))")),
        Mistake("no_residual", "each sublayer's input must be added back (the residual connection) before the norm: LayerNorm(x + Sublayer(x)).",
                swap("(x + self.dropout(", "(self.dropout(", every=True)),
        Mistake("ignores_mask", "pass the mask on to the self-attention, so that no token attends to padding.", swap("(x, x, x, mask)", "(x, x, x)")),
        Mistake("one_norm", "each sublayer has its own LayerNorm: norm1 after attention, norm2 after the feed-forward network.", swap("return self.norm2(", "return self.norm1(")),
    ]),
    _layer_or_stack("Encoder", 2, encoder_cases, depends_on=("EncoderLayer",), mistakes=[
        Mistake("not_chained", "each layer must take the previous layer's output (x = layer(x, mask)), not the stack's input.", _not_chained("layer(x, mask)")),
        Mistake("same_layer", SAME_LAYER, _same_layer("EncoderLayer")),
        Mistake("drops_mask", "pass the mask to every layer.", swap("layer(x, mask)", "layer(x)")),
    ]),
    _layer_or_stack("DecoderLayer", 3, decoder_layer_cases, depends_on=("LayerNorm", "FeedForward"), mistakes=[
        Mistake("cross_uses_decoder_keys", "in cross-attention the queries come from the decoder but the keys and values from the encoder's output (memory).",
                swap(CROSS, "self.cross_attn(x, x, x)")),
        Mistake("no_causal_mask", "the decoder's self-attention must use tgt_mask, the causal mask, or each position sees the future.",
                swap("(x, x, x, tgt_mask)", "(x, x, x)")),
        Mistake("residual_after_norm", AFTER_NORM, _residual_after_norm(last=3)),
        Mistake("no_cross_attention", "the decoder layer has three sublayers: masked self-attention, cross-attention to memory, feed-forward.",
                swap(f"        attended, _ = {CROSS}\n        {ADD_NORM_2}\n", "")),
        Mistake("memory_normalised", "use the encoder's output (memory) as it is for the keys and values of cross-attention.",
                swap(CROSS, "self.cross_attn(x, self.norm1(memory), self.norm1(memory), src_mask)")),
    ]),
    _layer_or_stack("Decoder", 2, decoder_cases, depends_on=("DecoderLayer",), mistakes=[
        Mistake("not_chained", "each layer must take the previous layer's output (x = layer(x, memory, ...)), not the stack's input.",
                _not_chained("layer(x, memory, src_mask, tgt_mask)")),
        Mistake("same_layer", SAME_LAYER, _same_layer("DecoderLayer")),
        Mistake("chains_memory", "every decoder layer attends to the same memory, the encoder's final output.",
                swap("x = layer(x, memory, src_mask, tgt_mask)", "x = layer(x, memory, src_mask, tgt_mask)\n            memory = x")),
    ]),
    Exercise(
        "Transformer", _with_random_norms(tf.Transformer), points=4, cases=transformer_cases, kind="module",
        parts={"no mask": 2, "padding masks": 1, "tied weights": 1}, depends_on=("Encoder", "Decoder"),
        mistakes=[
            Mistake("no_scaling", "multiply the token embeddings by sqrt(d_model) before adding the positional encoding.", swap(" * math.sqrt(self.d_model)", "")),
            Mistake("no_positions", "add the sinusoidal positional encoding to the scaled embeddings; without it the model cannot tell positions apart.", swap(" + self.pe[: tokens.size(1)]", "")),
            Mistake("no_causal_mask", "the decoder must always get the causal mask (combined with tgt_mask when one is given), or each position sees the future.", swap("mask = causal_mask(tgt.size(1), device=tgt.device)\n        if tgt_mask is not None:\n            mask = mask & tgt_mask", "mask = tgt_mask")),
            Mistake("scaled_after_positions", "scale the embeddings by sqrt(d_model) before adding the positional encoding, not the sum.", swap("embedding(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)]", "(embedding(tokens) + self.pe[: tokens.size(1)]) * math.sqrt(self.d_model)")),
        ],
    ),
]

DEMO_MISTAKES = [("LayerNorm", "unbiased"), ("DecoderLayer", "cross_uses_decoder_keys")]
