"""Checks for notebook 03: attention in a recurrent encoder-decoder.

The known mistakes (a03_attention_mechanisms.toml) are small edits of the
reference's own source; the module mistakes keep the reference's submodules
and parameter names, so the check can load the reference weights.
"""
import torch

from autograder.checks.cases import Call, Case, Exercise
from autograder.inputs import Draw, dims, on_the_meta_device
from solutions_lib import seq2seq_attention as ref

NOTEBOOK = "03_attention_mechanisms"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


# ---------------------------------------------------------------- score functions


def _score_case(seed, B, T, d_s, d_h, dtype=torch.float32, hidden=False, init=None, part="main"):
    def make():
        r = Draw(seed)
        return Call((r.randn(B, d_s, dtype=dtype), r.randn(B, T, d_h, dtype=dtype)), init=init)

    label = dims(B=B, T=T, d_s=d_s, d_h=d_h) + _dtype_label(dtype)
    return Case(label, make, hidden=hidden, part=part)


def dot_cases():
    return [
        _score_case(1, 2, 5, 8, 8), _score_case(2, 3, 1, 4, 4), _score_case(3, 4, 6, 16, 16, dtype=torch.float64),
        _score_case(4, 5, 9, 12, 12, hidden=True),
    ]


def scaled_cases():
    return [
        _score_case(11, 2, 5, 8, 8), _score_case(12, 3, 4, 64, 64), _score_case(13, 4, 6, 16, 16, dtype=torch.float64),
        _score_case(14, 2, 7, 32, 32, hidden=True),
    ]


def general_cases():
    return [
        _score_case(21, 2, 5, 6, 6, init=(6, 6)), _score_case(22, 3, 4, 4, 7, init=(4, 7)),
        _score_case(23, 1, 6, 8, 5, init=(8, 5)), _score_case(24, 4, 7, 10, 6, init=(10, 6), hidden=True),
    ]


def additive_cases():
    return [
        _score_case(31, 2, 5, 6, 6, init=(6, 6, 4)), _score_case(32, 3, 4, 4, 7, init=(4, 7, 5)),
        _score_case(33, 1, 6, 8, 5, init=(8, 5, 8)), _score_case(34, 4, 7, 10, 6, init=(10, 6, 3), hidden=True),
    ]


def cosine_cases():
    return [
        _score_case(41, 2, 5, 8, 8), _score_case(42, 3, 4, 3, 3), _score_case(43, 4, 6, 16, 16, dtype=torch.float64),
        _score_case(44, 5, 9, 12, 12, dtype=torch.float64, hidden=True),
    ]


def location_cases():
    return [
        _score_case(51, 2, 5, 6, 4, init=(6, 8)), _score_case(52, 3, 8, 4, 4, init=(4, 8)),
        _score_case(53, 1, 3, 5, 7, init=(5, 10)), _score_case(54, 4, 6, 8, 3, init=(8, 12), hidden=True),
    ]


# ---------------------------------------------------------------- weights and context


def _empty_row(m):
    """The mask m with every position of one example masked (an empty source)."""
    m[m.size(0) // 2] = False
    return m


def _weights_case(seed, B, T, mask=False, dtype=torch.float32, hidden=False, empty_row=False):
    def make():
        r = Draw(seed)
        scores = 2 * r.randn(B, T, dtype=dtype)
        if not mask:
            return Call((scores,))
        m = r.mask(B, T)
        return Call((scores,), {"mask": _empty_row(m) if empty_row else m})

    label = dims(B=B, T=T) + (", mask" if mask else "") + (", one row all masked" if empty_row else "") + _dtype_label(dtype)
    return Case(label, make, part="an empty row" if empty_row else "with a mask" if mask else "no mask", hidden=hidden)


def weights_cases():
    return [
        _weights_case(61, 3, 5), _weights_case(62, 1, 7), _weights_case(63, 4, 6, dtype=torch.float64),
        _weights_case(64, 3, 6, mask=True), _weights_case(65, 2, 8, mask=True, dtype=torch.float64),
        _weights_case(68, 3, 5, mask=True, empty_row=True),
        _weights_case(66, 5, 4, hidden=True), _weights_case(67, 4, 9, mask=True, hidden=True),
        _weights_case(69, 4, 7, mask=True, empty_row=True, hidden=True),
    ]


def _context_case(seed, B, T, d_h, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        alpha = torch.softmax(r.randn(B, T, dtype=dtype), dim=-1)
        return Call((alpha, r.randn(B, T, d_h, dtype=dtype)))

    return Case(dims(B=B, T=T, d_h=d_h) + _dtype_label(dtype), make, hidden=hidden)


def context_cases():
    return [
        _context_case(71, 2, 5, 8), _context_case(72, 3, 3, 3), _context_case(73, 4, 6, 5, dtype=torch.float64),
        _context_case(74, 5, 7, 6, hidden=True),
    ]


# ---------------------------------------------------------------- the decoder step


def _step_case(seed, B, T, vocab, d_emb, d_h, mask=False, hidden=False, empty_row=False):
    def make():
        r = Draw(seed)
        y_prev = r.integers(0, vocab, B)
        s_prev, H = r.randn(B, d_h), r.randn(B, T, d_h)
        kwargs = {"mask": _empty_row(r.mask(B, T)) if empty_row else r.mask(B, T)} if mask else {}
        return Call((y_prev, s_prev, H), kwargs, init=(vocab, d_emb, d_h))

    label = dims(B=B, T=T, vocab_size=vocab, d_emb=d_emb, d_h=d_h) + (", mask" if mask else "") + (", one row all masked" if empty_row else "")
    return Case(label, make, part="with a mask" if mask else "no mask", hidden=hidden)


def step_cases():
    return [
        _step_case(81, 2, 5, 11, 4, 6), _step_case(82, 3, 7, 9, 5, 8), _step_case(83, 3, 6, 11, 4, 6, mask=True),
        _step_case(86, 3, 5, 11, 4, 6, mask=True, empty_row=True),
        _step_case(84, 4, 8, 13, 6, 5, hidden=True), _step_case(85, 2, 9, 7, 3, 4, mask=True, hidden=True),
        _step_case(87, 2, 6, 9, 5, 4, mask=True, empty_row=True, hidden=True),
    ]


# ---------------------------------------------------------------- the whole model


def _seq2seq_case(seed, lengths, T_out, vocab, d_emb, d_h, hidden=False):
    def make():
        r = Draw(seed)
        B, T_src = len(lengths), max(lengths)
        src = r.integers(3, vocab, B, T_src)
        for b, n in enumerate(lengths):
            src[b, n:] = 0
        tgt_in = r.integers(3, vocab, B, T_out)
        tgt_in[:, 0] = 1
        return Call((src, tgt_in), init=(vocab, d_emb, d_h))

    label = f"source lengths {lengths}, " + dims(T_out=T_out, vocab_size=vocab, d_emb=d_emb, d_h=d_h)
    return Case(label, make, hidden=hidden)


def seq2seq_cases():
    return [
        _seq2seq_case(91, [5, 5], 4, 12, 4, 6), _seq2seq_case(92, [6, 3, 4], 5, 10, 5, 8),
        _seq2seq_case(93, [2, 7, 7, 5], 3, 9, 3, 5, hidden=True),
        # every tensor made in forward too (a first state, the rows picked from H) goes on src's device: on the meta
        # device a layer whose weights are there raises when handed a CPU tensor, as on a GPU
        # (autograder.checks.running.layers_keep_to_meta)
        on_the_meta_device(_seq2seq_case(94, [4, 2], 3, 10, 4, 6)),
        on_the_meta_device(_seq2seq_case(95, [3, 5, 1], 4, 11, 3, 5), hidden=True),
    ]


# ---------------------------------------------------------------- the exercises


EXERCISES = [
    Exercise("dot_score", ref.dot_score, points=1, cases=dot_cases),
    Exercise("scaled_dot_score", ref.scaled_dot_score, points=1, cases=scaled_cases, depends_on=("dot_score",)),
    Exercise("GeneralScore", ref.GeneralScore, points=1, cases=general_cases, kind="module", depends_on=("dot_score",)),
    Exercise("AdditiveScore", ref.AdditiveScore, points=2, cases=additive_cases, kind="module"),
    Exercise("cosine_score", ref.cosine_score, points=1, cases=cosine_cases, depends_on=("dot_score",)),
    Exercise("LocationScore", ref.LocationScore, points=1, cases=location_cases, kind="module"),
    Exercise("attention_weights", ref.attention_weights, points=1, cases=weights_cases,
             parts={"no mask": 2, "with a mask": 1, "an empty row": 0.5}),
    Exercise("context_vector", ref.context_vector, points=1, cases=context_cases),
    Exercise(
        "AttentionDecoderStep", ref.AttentionDecoderStep, points=3, cases=step_cases, kind="module",
        parts={"no mask": 2, "with a mask": 1}, depends_on=("AdditiveScore", "attention_weights", "context_vector"),
        returns=("logits", "new state", "attention weights"),
    ),
    Exercise(
        "Seq2SeqAttention", ref.Seq2SeqAttention, points=3, cases=seq2seq_cases, kind="module",
        depends_on=("AttentionDecoderStep",), returns=("logits", "attention weights"), parts={"main": 2, "device": 0.5},
    ),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("AdditiveScore", "no_tanh"), ("attention_weights", "over_batch")]
