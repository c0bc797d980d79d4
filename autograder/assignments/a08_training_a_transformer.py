"""Checks for notebook 08: training the Transformer.

Each known mistake is an edit of the reference's source (autograder.mutants), but
two of exact_match's, written out (each says why).

train_step is checked by what it does to the model: each case builds the same
small Transformer, optimizer (with a non-empty Adam state and stale gradients
left over from an earlier batch) and scheduler for the reference and for the
learner, and compares the loss returned and every parameter after the step
(state_after=True).
"""
import functools

import torch
import torch.nn.functional as F

import solutions_lib.training as ref
from autograder.checks.cases import Call, Case, Exercise
from autograder.fixtures import CopyModel, LinearWarmup
from autograder.inputs import Draw, dims, on_the_meta_device
from course_lib.transformer import Transformer  # PyTorch-backed: the student distribution stores these cases (autograder.fixtures)

NOTEBOOK = "08_training_a_transformer"
PAD, BOS, EOS = 0, 1, 2


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


def _targets(r, B, T, V, min_len=1):
    """(B, T) target ids: random tokens (3..V-1), <eos>, then padding; lengths vary."""
    lengths = r.integers(min_len, T, B)
    lengths[0] = T - 1  # one row fills the whole width
    ids = r.integers(3, V, B, T)
    pos = torch.arange(T)[None, :]
    ids = torch.where(pos == lengths[:, None], torch.full_like(ids, EOS), ids)
    return ids.masked_fill(pos > lengths[:, None], PAD)


def _sources(r, B, T, V):
    lengths = r.integers(1, T + 1, B)
    lengths[0] = T
    ids = r.integers(3, V, B, T)
    return ids.masked_fill(torch.arange(T)[None, :] >= lengths[:, None], PAD)


# ---------------------------------------------------------------- shift_right


def _shift_case(seed, B, T, V=12, bos_id=BOS, dtype=torch.long, hidden=False):
    """tgt of `dtype`; another than int64 is the part "dtype": the <bos> column takes tgt's dtype."""
    def make():
        r = Draw(seed)
        return Call((_targets(r, B, T, V).to(dtype), bos_id))

    if dtype == torch.long:
        return Case(dims(B=B, T=T) + f", bos_id={bos_id}", make, hidden=hidden, grad=False)
    return Case(dims(B=B, T=T) + f", bos_id={bos_id}, tgt of dtype {str(dtype).replace('torch.', '')}", make, part="dtype",
                hidden=hidden, grad=False)


def shift_cases():
    return [_shift_case(801, 2, 5), _shift_case(802, 3, 8), _shift_case(803, 1, 2), _shift_case(804, 4, 7, bos_id=5, hidden=True),
            _shift_case(805, 3, 6, dtype=torch.int32), _shift_case(806, 2, 7, bos_id=4, dtype=torch.int16, hidden=True),
            on_the_meta_device(_shift_case(807, 2, 6)), on_the_meta_device(_shift_case(808, 3, 5, bos_id=3), hidden=True)]


# ---------------------------------------------------------------- make_masks


def _masks_case(seed, B, T_src, T_tgt, pad_id=PAD, hidden=False):
    def make():
        r = Draw(seed)
        src = _sources(r, B, T_src, 10)
        tgt_in = torch.cat([torch.full((B, 1), BOS), _targets(r, B, T_tgt, 10)[:, :-1]], dim=1)
        if pad_id != PAD:
            src, tgt_in = src.masked_fill(src == PAD, pad_id), tgt_in.masked_fill(tgt_in == PAD, pad_id)
        return Call((src, tgt_in), {"pad_id": pad_id})

    return Case(dims(B=B, T_src=T_src, T_tgt=T_tgt) + ("" if pad_id == PAD else f", pad_id={pad_id}"), make, hidden=hidden, grad=False)


def masks_cases():
    return [
        _masks_case(811, 2, 5, 4), _masks_case(812, 3, 7, 6), _masks_case(813, 1, 3, 3),
        _masks_case(814, 4, 6, 8, pad_id=9, hidden=True),
        on_the_meta_device(_masks_case(816, 2, 6, 5)), on_the_meta_device(_masks_case(817, 3, 4, 6), hidden=True),
    ]


# ---------------------------------------------------------------- label_smoothed_cross_entropy


def _loss_case(seed, B, T, V, smoothing=0.1, dtype=torch.float32, part="main", hidden=False):
    def make():
        r = Draw(seed)
        return Call((r.randn(B, T, V, dtype=dtype) * 2, _targets(r, B, T, V)), {"smoothing": smoothing, "pad_id": PAD})

    label = dims(B=B, T=T, V=V) + f", smoothing={smoothing}" + _dtype_label(dtype)
    return Case(label, make, part=part, hidden=hidden)


def loss_cases():
    return [
        _loss_case(821, 2, 5, 7, smoothing=0.0, part="no smoothing"),
        _loss_case(822, 3, 6, 9, smoothing=0.0, dtype=torch.float64, part="no smoothing"),
        _loss_case(823, 2, 5, 7, part="smoothing"),
        _loss_case(824, 3, 4, 11, smoothing=0.2, dtype=torch.float64, part="smoothing"),
        _loss_case(825, 4, 6, 13, smoothing=0.0, part="no smoothing", hidden=True),
        _loss_case(826, 4, 8, 10, smoothing=0.3, part="smoothing", hidden=True),
    ]


# ---------------------------------------------------------------- warmup_lr


def _lr_case(step, d_model, warmup, hidden=False):
    return Case(f"step={step}, d_model={d_model}, warmup={warmup}", lambda: Call((step, d_model, warmup)), hidden=hidden, grad=False)


def lr_cases():
    return [
        _lr_case(1, 512, 4000), _lr_case(100, 512, 4000), _lr_case(4000, 512, 4000), _lr_case(10000, 512, 4000),
        _lr_case(50, 128, 200), _lr_case(0, 64, 100), _lr_case(7, 256, 10, hidden=True), _lr_case(123456, 96, 3000, hidden=True),
    ]


# ---------------------------------------------------------------- train_step


PRECISIONS = {  # the precision paths of section 8, on the CPU: (autocast's dtype, the scaler's first scale)
    "bfloat16": (torch.bfloat16, None),
    "float16": (torch.float16, 2.0**8),  # a T4's path; the scaled gradients stay finite, so the step is taken
    "float16, overflow": (torch.float16, 2.0**24),  # the scaled gradients overflow: the scaler skips the step
}


def _step_case(seed, B, T_src, T_tgt, V=11, d_model=16, h=2, N=1, smoothing=0.1, clip=0.5, dtype=torch.float32, amp=None,
               dropout=0.0, hidden=False):
    """Fresh model, optimizer and scheduler from a fixed seed, as after a few steps of training; amp: a key of
    PRECISIONS, the step under that autocast (and gradient scaler, which doubles its scale after each good step).
    dropout: a model with this dropout, handed over in eval mode (as greedy_decode or an evaluation leaves it), the
    step run right after torch.manual_seed(seed), so that the reference and the learner draw the same masks."""

    def make():
        r = Draw(seed)
        torch.manual_seed(seed)
        model = Transformer(V, V, d_model=d_model, h=h, d_ff=2 * d_model, N=N, dropout=dropout, max_len=32).to(dtype)
        params = list(model.parameters())
        optimizer = torch.optim.AdamW(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, LinearWarmup(0.01, 4))
        for _ in range(2):  # give Adam a non-empty state, so that clipping changes the update
            for p in params:
                p.grad = 0.1 * r.randn(*p.shape, dtype=dtype)
            optimizer.step()
            scheduler.step()
        for p in params:  # gradients left over from an earlier batch
            p.grad = r.randn(*p.shape, dtype=dtype)
        src, tgt = _sources(r, B, T_src, V), _targets(r, B, T_tgt, V)
        kwargs = {"bos_id": BOS, "pad_id": PAD, "smoothing": smoothing, "clip": clip}
        if amp:
            low, scale = PRECISIONS[amp]
            kwargs["autocast"] = functools.partial(torch.autocast, "cpu", dtype=low)  # a lambda would not pickle
            if scale:
                kwargs["scaler"] = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=1)
        if dropout:
            return Call((model.eval(), optimizer, scheduler, src, tgt), kwargs, seed=seed)
        return Call((model, optimizer, scheduler, src, tgt), kwargs)

    label = dims(B=B, T_src=T_src, T_tgt=T_tgt, d_model=d_model, h=h, N=N) + f", smoothing={smoothing}, clip={clip}" + _dtype_label(dtype)
    if amp:
        label += {"bfloat16": ", bfloat16 autocast", "float16": ", float16 autocast + scaler",
                  "float16, overflow": ", float16 autocast + scaler, overflowing"}[amp]
    if dropout:
        label += f", dropout={dropout}, the model handed over in eval mode"
    part = "training mode" if dropout else "mixed precision" if amp else "float32"
    return Case(label, make, part=part, hidden=hidden, grad=False)


def step_cases():
    return [
        _step_case(831, 3, 6, 5), _step_case(832, 2, 4, 7, smoothing=0.0, clip=0.3, dtype=torch.float64),
        _step_case(833, 4, 7, 6, d_model=24, h=3, N=2, hidden=True),
        _step_case(834, 3, 6, 5, amp="bfloat16"), _step_case(835, 3, 5, 6, amp="float16"),
        _step_case(836, 2, 6, 5, amp="float16, overflow"), _step_case(837, 4, 6, 6, clip=0.3, amp="float16", hidden=True),
        _step_case(838, 3, 6, 5, dropout=0.3), _step_case(839, 4, 5, 7, d_model=24, h=3, dropout=0.2, hidden=True),
    ]


# ---------------------------------------------------------------- greedy_decode


WITHOUT_GRADIENTS = "without gradients"  # the part whose model counts its calls with gradients on
COUNTING = ", the model counting its calls with gradients on"


def _decode_case(seed, B, T_src, max_len, model="copy", dropout=0.0, counting=False, hidden=False):
    """model: "copy" or "random"; dropout: a random Transformer with this dropout, handed over in training mode
    (as train_step leaves it), decoded right after torch.manual_seed(seed); counting: a random Transformer that
    counts its calls with gradients on (the part WITHOUT_GRADIENTS: greedy_decode runs under torch.no_grad()).
    Every other model comes in eval mode, so that the state after the call (the model's mode and counts) tells
    a missing model.eval() only in the part "eval mode"."""

    def make():
        r = Draw(seed)
        V = 9
        src = _sources(r, B, T_src, V)
        if model == "copy":
            m = CopyModel(V, seed)
        else:
            torch.manual_seed(seed)
            m = Transformer(V, V, d_model=16, h=2, d_ff=32, N=2, dropout=dropout, max_len=32, counting=counting)
        if dropout:
            return Call((m.train(), src, max_len), {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}, seed=seed)
        return Call((m.eval(), src, max_len), {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD})

    label = f"{'a model that copies its source' if model == 'copy' else 'a random Transformer'}, " + dims(B=B, T_src=T_src, max_len=max_len)
    if dropout:
        label += f", dropout={dropout}, the model handed over in training mode"
    label += COUNTING if counting else ""
    part = WITHOUT_GRADIENTS if counting else "eval mode" if dropout else "main"
    return Case(label, make, part=part, hidden=hidden, grad=False)


def decode_cases():
    return [
        _decode_case(841, 3, 5, 8), _decode_case(842, 4, 6, 4), _decode_case(843, 2, 5, 6, model="random"),
        _decode_case(844, 5, 7, 10, hidden=True), _decode_case(845, 3, 4, 5, model="random", hidden=True),
        _decode_case(846, 4, 6, 6, model="random", dropout=0.5), _decode_case(847, 5, 5, 7, model="random", dropout=0.5, hidden=True),
        _decode_case(848, 3, 5, 4, model="random", counting=True), _decode_case(849, 2, 6, 5, model="random", counting=True, hidden=True),
    ]


# ---------------------------------------------------------------- exact_match


def _match_case(seed, B, T, no_eos=False, hidden=False):
    """Predictions that are right, wrong in one token, right but with babble after <eos>, one token too long, or
    stopping one token early; no_eos: predictions that are right, or right but never say <eos> (the part of its own)."""

    def make():
        r = Draw(seed)
        tgt = _targets(r, B, T, 9, min_len=2)
        pred = torch.cat([tgt, torch.zeros(B, 2, dtype=torch.long)], dim=1)
        if no_eos:
            kind = torch.tensor([0, 3, 2])[r.integers(0, 3, B)]
            kind[:3] = torch.tensor([0, 3, 2])[:B]
        else:
            kind = r.integers(0, 5, B)
            kind[:5] = torch.arange(5)[:B]
        for b in range(B):
            end = int((tgt[b] == EOS).nonzero()[0])
            if kind[b] == 1:  # one wrong token
                pred[b, end - 1] = 3 + (int(tgt[b, end - 1]) - 2) % 6
            elif kind[b] == 2:  # right, then babble after <eos>
                pred[b, end + 1 :] = r.integers(3, 9, pred.size(1) - end - 1)
            elif kind[b] == 3 and no_eos:  # the right tokens, but never says <eos>
                pred[b, end:] = 4
            elif kind[b] == 3:  # one token too many, then <eos>
                pred[b, end], pred[b, end + 1] = 4, EOS
            elif kind[b] == 4:  # stops one token early
                pred[b, end - 1] = EOS
                pred[b, end:] = PAD
        return Call((pred, tgt), {"eos_id": EOS})

    label = dims(B=B, T=T) + (", predictions right but with no <eos>" if no_eos else "")
    return Case(label, make, part="a prediction with no <eos>" if no_eos else "main", hidden=hidden, grad=False)


def _cut_short_case(seed, B, T, hidden=False):
    """Predictions cut short, as decoding stops at max_len: row 0 holds exactly its target's tokens before <eos>,
    with no room left for <eos>; the other rows are their targets cut to the same length (with or without <eos>)."""

    def make():
        tgt = _targets(Draw(seed), B, T, 9, min_len=2)
        end = int((tgt[0] == EOS).nonzero()[0])  # row 0's tokens before its <eos>
        return Call((tgt[:, :end].clone(), tgt), {"eos_id": EOS})

    return Case(dims(B=B, T=T) + ", predictions cut short: row 0 the right tokens with no <eos> after them", make,
                part="a prediction with no <eos>", hidden=hidden, grad=False)


def match_cases():
    return [
        _match_case(851, 6, 6), _match_case(852, 9, 8), _match_case(853, 3, 5), _match_case(854, 12, 7, hidden=True),
        _match_case(855, 5, 6, no_eos=True), _match_case(856, 8, 7, no_eos=True, hidden=True),
        _cut_short_case(857, 4, 7), _cut_short_case(858, 6, 8, hidden=True),
    ]


# Two mistakes of exact_match that no edit of the reference expresses (the TOML file names them).

# a different measure (correct tokens over real tokens, on the tensors): no edit of the per-sequence loop expresses it
def match_token_accuracy(pred, target, eos_id=2):
    T = min(pred.size(1), target.size(1))
    real = target[:, :T] != 0
    return ((pred[:, :T] == target[:, :T]) & real).sum().item() / real.sum().item()


# compares padded tensors and averages in float32: an edit of the per-sequence loop (no cut at <eos>)
# gets the same verdicts but a float64 fraction, not this float32 value
def match_whole_rows(pred, target, eos_id=2):
    T = max(pred.size(1), target.size(1))
    p = F.pad(pred, (0, T - pred.size(1)))
    t = F.pad(target, (0, T - target.size(1)))
    return (p == t).all(1).float().mean().item()


# ---------------------------------------------------------------- length_penalty


def _penalty_case(length, alpha, hidden=False):
    return Case(f"length={length}, alpha={alpha}", lambda: Call((length, alpha)), hidden=hidden, grad=False)


def length_penalty_cases():
    return [
        _penalty_case(1, 0.6), _penalty_case(4, 0.6), _penalty_case(11, 1.0), _penalty_case(7, 0.0), _penalty_case(3, 2.0),
        _penalty_case(12, 0.8, hidden=True), _penalty_case(2, 1.3, hidden=True),
    ]


# ---------------------------------------------------------------- beam_search


def tiny_model(seed, V, eos_bias=0.0, scale=1.0, dtype=torch.float64, dropout=0.0, counting=False):
    """A random Transformer of vocabulary V (d_model=8, one layer), its logits multiplied by `scale` (sharper
    distributions) and <eos>'s raised by `eos_bias` (hypotheses that end sooner); in eval mode, or with `dropout`
    in training mode (as train_step leaves it). counting: it counts its calls with gradients on."""
    torch.manual_seed(seed)
    model = Transformer(V, V, d_model=8, h=2, d_ff=16, N=1, dropout=dropout, max_len=16, counting=counting).to(dtype)
    with torch.no_grad():
        model.out.weight.mul_(scale)
        model.out.bias.mul_(scale)
        model.out.bias[EOS] += eos_bias
    return model.train() if dropout else model.eval()


def sequences(V, max_len):
    """How many targets beam search chooses among: ending in <eos> after 1 to max_len tokens, or max_len tokens long."""
    return sum((V - 1) ** (L - 1) for L in range(1, max_len + 1)) + (V - 1) ** max_len


def _beam_case(seed, V, max_len, beam_size, alpha, eos_bias=0.0, scale=1.0, dtype=torch.float64, greedy_worse=False,
               dropout=0.0, counting=False, hidden=False):
    """A random tiny model and a source of 3 tokens. greedy_worse: greedy decoding finds a target that scores lower
    (tests/reference/test_reference_beam.py checks it); a beam_size of at least sequences(V, max_len) holds every
    target, so the beam finds the best of them all (the part "every target in the beam"). dropout: the model has
    this dropout and comes in training mode, the search run right after torch.manual_seed(seed) (the part "eval mode").
    counting: the model counts its calls with gradients on (the part WITHOUT_GRADIENTS: the search runs under
    torch.no_grad())."""
    def make():
        r = Draw(seed)
        src = r.integers(3, V, 1, 3)
        return Call((tiny_model(seed, V, eos_bias, scale, dtype, dropout, counting), src, beam_size, max_len),
                    {"alpha": alpha, "bos_id": BOS, "eos_id": EOS, "pad_id": PAD}, seed=seed if dropout else None)

    wide = beam_size >= sequences(V, max_len)
    label = (dims(V=V, max_len=max_len, beam_size=beam_size) + (f" (all {sequences(V, max_len)} targets)" if wide else "")
             + f", alpha={alpha}" + _dtype_label(dtype) + ("; greedy finds a worse target" if greedy_worse else ""))
    if dropout:
        label += f", dropout={dropout}, the model handed over in training mode"
    label += COUNTING if counting else ""
    part = WITHOUT_GRADIENTS if counting else "eval mode" if dropout else "every target in the beam" if wide else "a narrow beam"
    return Case(label, make, part=part, hidden=hidden, grad=False)


def beam_search_cases():
    return [
        _beam_case(905, 4, 4, 121, 0.6, eos_bias=-0.5, scale=2.0, greedy_worse=True),
        _beam_case(911, 5, 3, 85, 1.0, eos_bias=-1.0, scale=2.0, greedy_worse=True),
        _beam_case(862, 5, 3, 85, 1.0, eos_bias=-1.0, scale=2.0),
        _beam_case(863, 4, 4, 2, 0.6, greedy_worse=True),
        _beam_case(864, 5, 4, 3, 0.6, scale=2.0, greedy_worse=True),
        _beam_case(865, 6, 5, 4, 1.0, eos_bias=-0.5, scale=2.0, dtype=torch.float32, greedy_worse=True),
        _beam_case(891, 5, 5, 3, 1.0, eos_bias=0.5, scale=3.0),
        _beam_case(897, 6, 4, 4, 0.6, eos_bias=1.0, scale=2.0, greedy_worse=True),
        _beam_case(866, 4, 4, 121, 0.0, scale=2.0, greedy_worse=True, hidden=True),
        _beam_case(861, 4, 3, 40, 0.6, hidden=True),
        _beam_case(867, 6, 4, 3, 0.6, scale=3.0, greedy_worse=True, hidden=True),
        _beam_case(868, 5, 4, 3, 0.6, scale=2.0, greedy_worse=True, dropout=0.5),
        _beam_case(869, 6, 4, 4, 1.0, scale=2.0, greedy_worse=True, dropout=0.5, hidden=True),
        _beam_case(870, 5, 3, 3, 0.6, scale=2.0, greedy_worse=True, counting=True), _beam_case(871, 6, 4, 2, 1.0, counting=True, hidden=True),
    ]


# ---------------------------------------------------------------- the exercises


EXERCISES = [
    Exercise("shift_right", ref.shift_right, points=1, cases=shift_cases, parts={"main": 3, "dtype": 1, "device": 1}),
    Exercise("make_masks", ref.make_masks, points=2, cases=masks_cases, returns=("src_mask", "tgt_mask"), parts={"main": 3, "device": 1}),
    Exercise("label_smoothed_cross_entropy", ref.label_smoothed_cross_entropy, points=3, cases=loss_cases, parts={"no smoothing": 1, "smoothing": 2}),
    Exercise("warmup_lr", ref.warmup_lr, points=1, cases=lr_cases),
    Exercise(
        "train_step", ref.train_step, points=3, cases=step_cases, returns=("loss", "state after the step"), state_after=True,
        parts={"float32": 2, "mixed precision": 1, "training mode": 0.5},
        depends_on=("shift_right", "make_masks", "label_smoothed_cross_entropy"),
    ),
    # state_after: the model's mode and, for a counting model, its calls with gradients on (Transformer.what_it_saw)
    Exercise("greedy_decode", ref.greedy_decode, points=2, cases=decode_cases, returns=("ids", "state after greedy_decode"),
             state_after=True, parts={"main": 2, "eval mode": 0.5, WITHOUT_GRADIENTS: 0.5}),
    Exercise("exact_match", ref.exact_match, points=1, cases=match_cases, parts={"main": 2, "a prediction with no <eos>": 1}),
    Exercise("length_penalty", ref.length_penalty, points=1, cases=length_penalty_cases),
    Exercise(
        "beam_search", ref.beam_search, points=3, cases=beam_search_cases, returns=("best target", "score", "state after beam_search"),
        state_after=True, parts={"every target in the beam": 1, "a narrow beam": 2, "eval mode": 0.5, WITHOUT_GRADIENTS: 0.5},
        depends_on=("length_penalty",),
    ),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("shift_right", "not_shifted"), ("label_smoothed_cross_entropy", "smoothing_on_pad")]
