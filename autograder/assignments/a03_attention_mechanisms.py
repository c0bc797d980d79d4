"""Checks for notebook 03: attention in a recurrent encoder-decoder.

Each known mistake is a small edit of the reference's own source
(autograder.mutants.swap); the module mistakes keep the reference's submodules
and parameter names, so the check can load the reference weights.
"""
import torch

from autograder.core import Call, Case, Exercise, Mistake
from autograder.inputs import Draw, dims
from autograder.mutants import swap
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
    return Case(label, make, part="with a mask" if mask else "no mask", hidden=hidden)


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
    ]


# ---------------------------------------------------------------- the catalog

UNSCALED = "you did not divide by sqrt(d_h), the width of the vectors."
SOFTMAX_BATCH = "you took the softmax over the batch (dim=0); each example's weights over its source positions (dim=-1) must sum to 1."
DOT = "(H @ s.unsqueeze(-1)).squeeze(-1)"
SCALE = " / math.sqrt(H.size(-1))"
ADDITIVE_SUM = "torch.tanh(self.W1(H) + self.W2(s).unsqueeze(1))"
NORM_S = "    s = s / s.norm(dim=-1, keepdim=True).clamp_min(eps)\n"
NORM_H = "    H = H / H.norm(dim=-1, keepdim=True).clamp_min(eps)\n"
MASK_FILL = 'scores = scores.masked_fill(~mask, float("-inf"))'
FIRST_T = "self.W(s)[:, : H.size(1)]"
STEP_WEIGHTS = "alpha = attention_weights(self.attention(s, H), mask)"
START = "H[torch.arange(src.size(0), device=src.device), last]"
FEED = "self.decoder(tgt_in[:, t], s, H, mask)"

EXERCISES = [
    Exercise("dot_score", ref.dot_score, points=1, cases=dot_cases, mistakes=[
        Mistake("summed_over_time", "you summed over the source positions (dim=1); sum the products over the features, one score per position.", swap(DOT, "(s.unsqueeze(1) * H).sum(dim=1)")),
        Mistake("scaled", "this is the plain dot product: do not divide by sqrt(d_h) here (that is the next exercise).", swap(DOT, DOT + SCALE)),
        Mistake("every_query", "H @ s.T scores every decoder state of the batch against every sequence; each example's state meets only its own encoder states (H @ s.unsqueeze(-1)).", swap(DOT, "H @ s.T")),
    ]),
    Exercise("scaled_dot_score", ref.scaled_dot_score, points=1, cases=scaled_cases, depends_on=("dot_score",), mistakes=[
        Mistake("unscaled", UNSCALED, swap(SCALE)),
        Mistake("by_d", "you divided by d_h instead of sqrt(d_h).", swap(SCALE, " / H.size(-1)")),
        Mistake("by_T", "you divided by the square root of the number of source positions T; the scale is sqrt(d_h), the width of the vectors.", swap(SCALE, " / math.sqrt(H.size(1))")),
    ]),
    Exercise("GeneralScore", ref.GeneralScore, points=1, cases=general_cases, kind="module", depends_on=("dot_score",), mistakes=[
        Mistake("no_W", "you left out W: the general score is s^T W h_i, i.e. s · W(h_i).", swap("dot_score(s, self.W(H))", "dot_score(s, H)")),
        Mistake("W_on_state", "you applied W to the decoder state; with self.W = nn.Linear(d_h, d_s) it maps the encoder states: s · W(h_i).", swap("dot_score(s, self.W(H))", "dot_score(self.W(s), H)")),
        Mistake("scaled", "the general score is not scaled: do not divide by sqrt(d).", swap("dot_score(s, self.W(H))", "dot_score(s, self.W(H)) / math.sqrt(s.size(-1))")),
    ]),
    Exercise("AdditiveScore", ref.AdditiveScore, points=2, cases=additive_cases, kind="module", mistakes=[
        Mistake("no_tanh", "the additive score is missing its tanh: v^T tanh(W1 h_i + W2 s); without it the score is linear.", swap(ADDITIVE_SUM, "self.W1(H) + self.W2(s).unsqueeze(1)")),
        Mistake("sum_instead_of_v", "you summed the tanh features instead of weighting them with v: apply self.v to them.", swap("self.v(hidden).squeeze(-1)", "hidden.sum(-1)")),
        Mistake("tanh_after_v", "the tanh goes inside, before v: v^T tanh(W1 h_i + W2 s), not tanh(v^T (...)).", swap(ADDITIVE_SUM, "self.W1(H) + self.W2(s).unsqueeze(1)") & swap("self.v(hidden)", "torch.tanh(self.v(hidden))")),
        Mistake("swapped", "W1 maps the encoder states H and W2 the decoder state s; you swapped them.", swap("self.W1(H) + self.W2(s)", "self.W2(H) + self.W1(s)")),
    ]),
    Exercise("cosine_score", ref.cosine_score, points=1, cases=cosine_cases, depends_on=("dot_score",), mistakes=[
        Mistake("only_query", "you normalised only the decoder state s; divide by the norm of each h_i too.", swap(NORM_H)),
        Mistake("only_keys", "you normalised only the encoder states h_i; divide by the norm of s too.", swap(NORM_S)),
        Mistake("norm_over_time", "you took the norm of H over the source positions (dim=1); each h_i is normalised over its features (dim=-1).", swap("H.norm(dim=-1", "H.norm(dim=1")),
        Mistake("unnormalised", "this is the plain dot product: divide by |s| |h_i| to get a cosine.", swap(NORM_S) & swap(NORM_H)),
    ]),
    Exercise("LocationScore", ref.LocationScore, points=1, cases=location_cases, kind="module", mistakes=[
        Mistake("all_positions", "return only the first T scores (T = H.size(1)), one per source position, not all max_len of them.", swap(FIRST_T, "self.W(s)")),
        Mistake("last_positions", "keep the first T scores, for positions 0..T-1, not the last T.", swap(FIRST_T, "self.W(s)[:, -H.size(1):]")),
        Mistake("softmax", "return the scores, not the weights: the softmax comes later, in attention_weights.", swap(FIRST_T, f"torch.softmax({FIRST_T}, dim=-1)")),
    ]),
    Exercise("attention_weights", ref.attention_weights, points=1, cases=weights_cases, parts={"no mask": 2, "with a mask": 1}, mistakes=[
        Mistake("over_batch", SOFTMAX_BATCH, swap("dim=-1", "dim=0")),
        Mistake("mask_after_softmax", "you applied the mask after the softmax, so the weights no longer sum to 1; fill the scores with -inf before it.", swap(MASK_FILL, "return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)")),
        Mistake("mask_inverted", "your mask polarity is inverted: True means 'may attend', so fill the scores where the mask is False.", swap("~mask", "mask")),
        Mistake("mask_ignored", "you ignored the mask; positions where it is False must get weight 0.", swap(f"    if mask is not None:\n        {MASK_FILL}\n")),
        Mistake("nan_rows", "a row whose positions are all masked gets NaN (softmax of a row of -inf alone is 0/0); give such a row zero weights, e.g. with .nan_to_num(0.0).", swap(".nan_to_num(0.0)")),
    ]),
    Exercise("context_vector", ref.context_vector, points=1, cases=context_cases, mistakes=[
        Mistake("over_features", "you summed over the features (dim=-1); the context sums the weighted states over the source positions (dim=1).", swap(".sum(dim=1)", ".sum(dim=-1)")),
        Mistake("over_batch", "you summed over the batch (dim=0); the context sums the weighted states over the source positions (dim=1).", swap(".sum(dim=1)", ".sum(dim=0)")),
        Mistake("mean", "you averaged the weighted states; the weights already sum to 1, so add them up (sum, not mean).", swap(".sum(dim=1)", ".mean(dim=1)")),
        Mistake("unweighted", "you added the states without weighting them by alpha.", swap("(alpha.unsqueeze(-1) * H).sum(dim=1)", "H.sum(dim=1)")),
    ]),
    Exercise(
        "AttentionDecoderStep", ref.AttentionDecoderStep, points=3, cases=step_cases, kind="module",
        parts={"no mask": 2, "with a mask": 1}, depends_on=("AdditiveScore", "attention_weights", "context_vector"),
        returns=("logits", "new state", "attention weights"),
        mistakes=[
            Mistake("old_state", "you scored the encoder states with the previous state s_prev (Bahdanau's order); this step follows Luong's: update the state first and attend with the new s.", swap("self.attention(s, H)", "self.attention(s_prev, H)")),
            Mistake("swapped_concat", "the output layer reads [a; s], the context first, then the state.", swap("torch.cat([a, s]", "torch.cat([s, a]")),
            Mistake("softmax_over_batch", SOFTMAX_BATCH, swap(STEP_WEIGHTS, f"scores = self.attention(s, H)\n        if mask is not None:\n            {MASK_FILL}\n        alpha = torch.softmax(scores, dim=0)")),
            Mistake("ignores_mask", "the step ignores its mask; pass it on to attention_weights so that padding gets no weight.", swap(STEP_WEIGHTS, "alpha = attention_weights(self.attention(s, H))")),
        ],
    ),
    Exercise(
        "Seq2SeqAttention", ref.Seq2SeqAttention, points=3, cases=seq2seq_cases, kind="module",
        depends_on=("AttentionDecoderStep",), returns=("logits", "attention weights"),
        mistakes=[
            Mistake("padded_end", "the decoder starts from the encoder state after the padding; take each source's state at its last real token (position length - 1).", swap(START, "H[:, -1]")),
            Mistake("zero_state", "the decoder starts from zeros; start it from the encoder's state at the last real token of each source.", swap(START, "torch.zeros_like(H[:, 0])")),
            Mistake("no_padding_mask", "you attend to the padding too; pass the mask src != 0 to every decoder step.", swap(FEED, "self.decoder(tgt_in[:, t], s, H)")),
            Mistake("own_predictions", "during training feed the decoder the given inputs tgt_in[:, t] (teacher forcing), not its own predictions.", swap("        for t in", "        y = tgt_in[:, 0]\n        for t in") & swap(FEED, "self.decoder(y, s, H, mask)") & swap("logits.append(step_logits)\n", "logits.append(step_logits)\n            y = step_logits.argmax(dim=-1)\n")),
        ],
    ),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("AdditiveScore", "no_tanh"), ("attention_weights", "over_batch")]
