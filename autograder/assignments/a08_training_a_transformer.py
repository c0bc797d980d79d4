"""Checks for notebook 08: training the Transformer.

Each known mistake is a complete wrong implementation, written as a learner
would write it, self-contained (only torch, math, nn, F), so that it can be
pasted into a notebook and graded on its own.

train_step is checked by what it does to the model: each case builds the same
small Transformer, optimizer (with a non-empty Adam state and stale gradients
left over from an earlier batch) and scheduler for the reference and for the
learner, and compares the loss returned and every parameter after the step.
The check machinery compares only what a function returns, so this module
adds the parameters to train_step's outputs (see _with_parameters_after_step).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

import autograder.core as core
import solutions_lib.training as ref
from autograder.core import Call, Case, Exercise, Mistake
from autograder.fixtures import CopyModel, LinearWarmup
from autograder.inputs import Draw, dims
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


def _shift_case(seed, B, T, V=12, bos_id=BOS, hidden=False):
    def make():
        r = Draw(seed)
        return Call((_targets(r, B, T, V), bos_id))

    return Case(dims(B=B, T=T) + f", bos_id={bos_id}", make, hidden=hidden, grad=False)


def shift_cases():
    return [_shift_case(801, 2, 5), _shift_case(802, 3, 8), _shift_case(803, 1, 2), _shift_case(804, 4, 7, bos_id=5, hidden=True)]


def shift_not_shifted(tgt, bos_id=1):
    return tgt.clone()


def shift_left(tgt, bos_id=1):
    return torch.cat([tgt[:, 1:], torch.full_like(tgt[:, :1], bos_id)], dim=1)


def shift_keeps_last(tgt, bos_id=1):
    return torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt], dim=1)


def shift_overwrites_first(tgt, bos_id=1):
    tgt_in = tgt.clone()
    tgt_in[:, 0] = bos_id
    return tgt_in


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
        _masks_case(811, 2, 5, 4),
        _masks_case(812, 3, 7, 6),
        _masks_case(813, 1, 3, 3),
        _masks_case(814, 4, 6, 8, pad_id=9, hidden=True),
    ]


def masks_not_causal(src, tgt_in, pad_id=0):
    src_mask = (src != pad_id).unsqueeze(1)
    T = tgt_in.size(1)
    tgt_mask = (tgt_in != pad_id).unsqueeze(1).expand(-1, T, T)
    return src_mask, tgt_mask


def masks_inverted(src, tgt_in, pad_id=0):
    src_mask = (src == pad_id).unsqueeze(1)
    T = tgt_in.size(1)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    tgt_mask = future | (tgt_in == pad_id).unsqueeze(1)
    return src_mask, tgt_mask


def masks_causal_only(src, tgt_in, pad_id=0):
    src_mask = (src != pad_id).unsqueeze(1)
    T = tgt_in.size(1)
    tgt_mask = torch.ones(T, T, dtype=torch.bool).tril().expand(tgt_in.size(0), T, T)
    return src_mask, tgt_mask


def masks_no_query_axis(src, tgt_in, pad_id=0):
    src_mask = src != pad_id
    T = tgt_in.size(1)
    tgt_mask = torch.ones(T, T, dtype=torch.bool).tril() & (tgt_in != pad_id).unsqueeze(1)
    return src_mask, tgt_mask


def masks_padding_on_queries(src, tgt_in, pad_id=0):
    src_mask = (src != pad_id).unsqueeze(1)
    T = tgt_in.size(1)
    tgt_mask = torch.ones(T, T, dtype=torch.bool).tril() & (tgt_in != pad_id).unsqueeze(2)
    return src_mask, tgt_mask


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


def loss_counts_padding(logits, target, smoothing=0.1, pad_id=0):
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)
    q = torch.full_like(log_p, smoothing / (V - 2))
    q.scatter_(-1, target.unsqueeze(-1), 1.0 - smoothing)
    q[..., pad_id] = 0.0
    return -(q * log_p).sum(-1).mean()


def loss_smoothing_on_pad(logits, target, smoothing=0.1, pad_id=0):
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)
    q = torch.full_like(log_p, smoothing / (V - 1))
    q.scatter_(-1, target.unsqueeze(-1), 1.0 - smoothing)
    per_token = -(q * log_p).sum(-1)
    return per_token[target != pad_id].mean()


def loss_sum_not_mean(logits, target, smoothing=0.1, pad_id=0):
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)
    q = torch.full_like(log_p, smoothing / (V - 2))
    q.scatter_(-1, target.unsqueeze(-1), 1.0 - smoothing)
    q[..., pad_id] = 0.0
    per_token = -(q * log_p).sum(-1)
    return per_token[target != pad_id].sum()


def loss_no_log(logits, target, smoothing=0.1, pad_id=0):
    V = logits.size(-1)
    p = F.softmax(logits, dim=-1)
    q = torch.full_like(p, smoothing / (V - 2))
    q.scatter_(-1, target.unsqueeze(-1), 1.0 - smoothing)
    q[..., pad_id] = 0.0
    per_token = -(q * p).sum(-1)
    return per_token[target != pad_id].mean()


def loss_ignores_smoothing(logits, target, smoothing=0.1, pad_id=0):
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=pad_id)


# ---------------------------------------------------------------- warmup_lr


def _lr_case(step, d_model, warmup, hidden=False):
    return Case(f"step={step}, d_model={d_model}, warmup={warmup}", lambda: Call((step, d_model, warmup)), hidden=hidden, grad=False)


def lr_cases():
    return [
        _lr_case(1, 512, 4000),
        _lr_case(100, 512, 4000),
        _lr_case(4000, 512, 4000),
        _lr_case(10000, 512, 4000),
        _lr_case(50, 128, 200),
        _lr_case(0, 64, 100),
        _lr_case(7, 256, 10, hidden=True),
        _lr_case(123456, 96, 3000, hidden=True),
    ]


def lr_off_by_sqrt(step, d_model, warmup=4000):
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.0)


def lr_no_d_model(step, d_model, warmup=4000):
    step = max(step, 1)
    return min(step**-0.5, step * warmup**-1.5)


def lr_max_not_min(step, d_model, warmup=4000):
    step = max(step, 1)
    return d_model**-0.5 * max(step**-0.5, step * warmup**-1.5)


def lr_step_zero(step, d_model, warmup=4000):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


# ---------------------------------------------------------------- train_step


def _step_case(seed, B, T_src, T_tgt, V=11, d_model=16, h=2, N=1, smoothing=0.1, clip=0.5, dtype=torch.float32, hidden=False):
    """Fresh model, optimizer and scheduler from a fixed seed, as after a few steps of training."""

    def make():
        r = Draw(seed)
        torch.manual_seed(seed)
        model = Transformer(V, V, d_model=d_model, h=h, N=N, d_ff=2 * d_model, dropout=0.0, max_len=32).to(dtype)
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
        return Call((model, optimizer, scheduler, src, tgt), {"bos_id": BOS, "pad_id": PAD, "smoothing": smoothing, "clip": clip})

    label = dims(B=B, T_src=T_src, T_tgt=T_tgt, d_model=d_model, h=h, N=N) + f", smoothing={smoothing}, clip={clip}" + _dtype_label(dtype)
    return Case(label, make, hidden=hidden, grad=False)


def step_cases():
    return [
        _step_case(831, 3, 6, 5),
        _step_case(832, 2, 4, 7, smoothing=0.0, clip=0.3, dtype=torch.float64),
        _step_case(833, 4, 7, 6, d_model=24, h=3, N=2, hidden=True),
    ]


def step_not_shifted(model, optimizer, scheduler, src, tgt, bos_id=1, pad_id=0, smoothing=0.1, clip=1.0):
    model.train()
    src_mask = (src != pad_id).unsqueeze(1)
    T = tgt.size(1)
    tgt_mask = torch.ones(T, T, dtype=torch.bool).tril() & (tgt != pad_id).unsqueeze(1)
    logits = model(src, tgt, src_mask, tgt_mask)
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)
    q = torch.full_like(log_p, smoothing / (V - 2))
    q.scatter_(-1, tgt.unsqueeze(-1), 1.0 - smoothing)
    q[..., pad_id] = 0.0
    loss = -(q * log_p).sum(-1)[tgt != pad_id].mean()
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    scheduler.step()
    return loss.item()


def step_no_zero_grad(model, optimizer, scheduler, src, tgt, bos_id=1, pad_id=0, smoothing=0.1, clip=1.0):
    model.train()
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1)
    src_mask = (src != pad_id).unsqueeze(1)
    T = tgt_in.size(1)
    tgt_mask = torch.ones(T, T, dtype=torch.bool).tril() & (tgt_in != pad_id).unsqueeze(1)
    logits = model(src, tgt_in, src_mask, tgt_mask)
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)
    q = torch.full_like(log_p, smoothing / (V - 2))
    q.scatter_(-1, tgt.unsqueeze(-1), 1.0 - smoothing)
    q[..., pad_id] = 0.0
    loss = -(q * log_p).sum(-1)[tgt != pad_id].mean()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    scheduler.step()
    return loss.item()


def step_no_clip(model, optimizer, scheduler, src, tgt, bos_id=1, pad_id=0, smoothing=0.1, clip=1.0):
    model.train()
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1)
    src_mask = (src != pad_id).unsqueeze(1)
    T = tgt_in.size(1)
    tgt_mask = torch.ones(T, T, dtype=torch.bool).tril() & (tgt_in != pad_id).unsqueeze(1)
    logits = model(src, tgt_in, src_mask, tgt_mask)
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)
    q = torch.full_like(log_p, smoothing / (V - 2))
    q.scatter_(-1, tgt.unsqueeze(-1), 1.0 - smoothing)
    q[..., pad_id] = 0.0
    loss = -(q * log_p).sum(-1)[tgt != pad_id].mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss.item()


def step_no_scheduler(model, optimizer, scheduler, src, tgt, bos_id=1, pad_id=0, smoothing=0.1, clip=1.0):
    model.train()
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1)
    src_mask = (src != pad_id).unsqueeze(1)
    T = tgt_in.size(1)
    tgt_mask = torch.ones(T, T, dtype=torch.bool).tril() & (tgt_in != pad_id).unsqueeze(1)
    logits = model(src, tgt_in, src_mask, tgt_mask)
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)
    q = torch.full_like(log_p, smoothing / (V - 2))
    q.scatter_(-1, tgt.unsqueeze(-1), 1.0 - smoothing)
    q[..., pad_id] = 0.0
    loss = -(q * log_p).sum(-1)[tgt != pad_id].mean()
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss.item()





# ---------------------------------------------------------------- greedy_decode


def _decode_case(seed, B, T_src, max_len, model="copy", hidden=False):
    def make():
        r = Draw(seed)
        V = 9
        src = _sources(r, B, T_src, V)
        if model == "copy":
            m = CopyModel(V, seed)
        else:
            torch.manual_seed(seed)
            m = Transformer(V, V, d_model=16, h=2, N=2, d_ff=32, dropout=0.0, max_len=32)
        return Call((m, src, max_len), {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD})

    label = f"{'a model that copies its source' if model == 'copy' else 'a random Transformer'}, " + dims(B=B, T_src=T_src, max_len=max_len)
    return Case(label, make, hidden=hidden, grad=False)


def decode_cases():
    return [
        _decode_case(841, 3, 5, 8),
        _decode_case(842, 4, 6, 4),
        _decode_case(843, 2, 5, 6, model="random"),
        _decode_case(844, 5, 7, 10, hidden=True),
        _decode_case(845, 3, 4, 5, model="random", hidden=True),
    ]


@torch.no_grad()
def decode_never_stops(model, src, max_len, bos_id=1, eos_id=2, pad_id=0):
    model.eval()
    src_mask = (src != pad_id).unsqueeze(1)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        logits = model.decode(memory, ys, src_mask)
        ys = torch.cat([ys, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ys


@torch.no_grad()
def decode_no_padding_after_eos(model, src, max_len, bos_id=1, eos_id=2, pad_id=0):
    model.eval()
    src_mask = (src != pad_id).unsqueeze(1)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        logits = model.decode(memory, ys, src_mask)
        ys = torch.cat([ys, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        if (ys == eos_id).any(1).all():
            break
    return ys


@torch.no_grad()
def decode_stops_at_first_eos(model, src, max_len, bos_id=1, eos_id=2, pad_id=0):
    model.eval()
    src_mask = (src != pad_id).unsqueeze(1)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        logits = model.decode(memory, ys, src_mask)
        next_id = logits[:, -1].argmax(-1)
        ys = torch.cat([ys, next_id[:, None]], dim=1)
        if (next_id == eos_id).any():
            break
    return ys


@torch.no_grad()
def decode_first_position(model, src, max_len, bos_id=1, eos_id=2, pad_id=0):
    model.eval()
    src_mask = (src != pad_id).unsqueeze(1)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        logits = model.decode(memory, ys, src_mask)
        next_id = logits[:, 0].argmax(-1).masked_fill(done, pad_id)
        ys = torch.cat([ys, next_id[:, None]], dim=1)
        done = done | (next_id == eos_id)
        if done.all():
            break
    return ys


@torch.no_grad()
def decode_without_bos(model, src, max_len, bos_id=1, eos_id=2, pad_id=0):
    model.eval()
    src_mask = (src != pad_id).unsqueeze(1)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        logits = model.decode(memory, ys, src_mask)
        next_id = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
        ys = torch.cat([ys, next_id[:, None]], dim=1)
        done = done | (next_id == eos_id)
        if done.all():
            break
    return ys[:, 1:]


# ---------------------------------------------------------------- exact_match


def _match_case(seed, B, T, hidden=False):
    """Predictions that are right, wrong in one token, right but with babble after <eos>, or missing <eos>."""

    def make():
        r = Draw(seed)
        tgt = _targets(r, B, T, 9, min_len=2)
        pred = torch.cat([tgt, torch.zeros(B, 2, dtype=torch.long)], dim=1)
        kind = r.integers(0, 5, B)
        kind[:5] = torch.arange(5)[:B]
        for b in range(B):
            end = int((tgt[b] == EOS).nonzero()[0])
            if kind[b] == 1:  # one wrong token
                pred[b, end - 1] = 3 + (int(tgt[b, end - 1]) - 2) % 6
            elif kind[b] == 2:  # right, then babble after <eos>
                pred[b, end + 1 :] = r.integers(3, 9, pred.size(1) - end - 1)
            elif kind[b] == 3:  # never says <eos>
                pred[b, end:] = 4
            elif kind[b] == 4:  # stops one token early
                pred[b, end - 1] = EOS
                pred[b, end:] = PAD
        return Call((pred, tgt), {"eos_id": EOS})

    return Case(dims(B=B, T=T), make, hidden=hidden, grad=False)


def match_cases():
    return [_match_case(851, 6, 6), _match_case(852, 9, 8), _match_case(853, 3, 5), _match_case(854, 12, 7, hidden=True)]


def match_token_accuracy(pred, target, eos_id=2):
    T = min(pred.size(1), target.size(1))
    real = target[:, :T] != 0
    return ((pred[:, :T] == target[:, :T]) & real).sum().item() / real.sum().item()


def match_whole_rows(pred, target, eos_id=2):
    T = max(pred.size(1), target.size(1))
    p = F.pad(pred, (0, T - pred.size(1)))
    t = F.pad(target, (0, T - target.size(1)))
    return (p == t).all(1).float().mean().item()


def match_count_not_fraction(pred, target, eos_id=2):
    hits = 0
    for p, t in zip(pred.tolist(), target.tolist()):
        p = p[: p.index(eos_id) + 1] if eos_id in p else p + [None]
        hits += p == t[: t.index(eos_id) + 1]
    return hits


def match_prefix(pred, target, eos_id=2):
    hits = 0
    for p, t in zip(pred.tolist(), target.tolist()):
        t = t[: t.index(eos_id)]
        hits += p[: len(t)] == t
    return hits / len(pred)


# ---------------------------------------------------------------- the catalog

EXERCISES = [
    Exercise(
        "shift_right",
        ref.shift_right,
        points=1,
        cases=shift_cases,
        mistakes=[
            Mistake("not_shifted", "you returned the targets unchanged: the decoder would see the very token it must predict; put <bos> in front and drop the last token.", shift_not_shifted),
            Mistake("shifted_left", "you shifted to the left; the decoder input is <bos> followed by the targets, shifted one place to the right.", shift_left),
            Mistake("keeps_last", "you kept every target token, so the input is one longer than the targets; drop the last column so both have length T.", shift_keeps_last),
            Mistake("overwrites_first", "you wrote <bos> over the first target instead of shifting: every other position then sees its own target.", shift_overwrites_first),
        ],
    ),
    Exercise(
        "make_masks",
        ref.make_masks,
        points=2,
        cases=masks_cases,
        returns=("src_mask", "tgt_mask"),
        mistakes=[
            Mistake("not_causal", "your target mask is not causal, so the decoder may look at the future tokens it has to predict; combine it with a lower-triangular mask.", masks_not_causal),
            Mistake("inverted", "your masks are inverted: True must mark what may be attended to (real tokens, the past).", masks_inverted),
            Mistake("causal_only", "your target mask ignores padding; combine the causal mask with (tgt_in != pad_id) for the keys.", masks_causal_only),
            Mistake("no_query_axis", "the source mask needs shape (B, 1, T_src): the middle axis broadcasts over the query positions.", masks_no_query_axis),
            Mistake("padding_on_queries", "you masked padded queries instead of padded keys: put the padding mask on the last axis, (tgt_in != pad_id).unsqueeze(1).", masks_padding_on_queries),
        ],
    ),
    Exercise(
        "label_smoothed_cross_entropy",
        ref.label_smoothed_cross_entropy,
        points=3,
        cases=loss_cases,
        parts={"no smoothing": 1, "smoothing": 2},
        mistakes=[
            Mistake("counts_padding", "you averaged over every position, padding included; average over the positions whose target is not pad_id.", loss_counts_padding),
            Mistake("smoothing_on_pad", "you gave part of the smoothing mass to the padding token; it gets 0, and the other V - 2 tokens share smoothing evenly.", loss_smoothing_on_pad),
            Mistake("sum_not_mean", "you summed the loss over the tokens; average it, so that its size does not depend on the batch.", loss_sum_not_mean),
            Mistake("no_log", "you multiplied by the probabilities instead of the log-probabilities; use F.log_softmax.", loss_no_log),
            Mistake("ignores_smoothing", "your loss ignores the smoothing argument: put 1 - smoothing on the target and smoothing / (V - 2) on every other token except padding.", loss_ignores_smoothing),
        ],
    ),
    Exercise(
        "warmup_lr",
        ref.warmup_lr,
        points=1,
        cases=lr_cases,
        mistakes=[
            Mistake("off_by_sqrt", "the warm-up branch is off by a square root: it is step * warmup^-1.5, so that both branches meet at step = warmup.", lr_off_by_sqrt),
            Mistake("no_d_model", "you left out the factor d_model^-0.5.", lr_no_d_model),
            Mistake("max_not_min", "take the min of the two branches, not the max: the rate rises during warm-up and falls after it.", lr_max_not_min),
            Mistake("step_zero", "at step 0 the formula divides by zero; treat step 0 as step 1 (a LambdaLR asks for step 0 first).", lr_step_zero),
        ],
    ),
    Exercise(
        "train_step",
        ref.train_step,
        points=3,
        cases=step_cases,
        returns=("loss", "state after the step"),
        state_after=True,
        depends_on=("shift_right", "make_masks", "label_smoothed_cross_entropy"),
        mistakes=[
            Mistake("not_shifted", "you fed the targets themselves to the decoder: with teacher forcing it reads shift_right(tgt), <bos> then the previous targets.", step_not_shifted),
            Mistake("no_zero_grad", "you did not clear the old gradients (optimizer.zero_grad()), so this batch's gradients were added to the previous ones.", step_no_zero_grad),
            Mistake("no_clip", "you did not clip the gradient norm; call nn.utils.clip_grad_norm_(model.parameters(), clip) between backward() and optimizer.step().", step_no_clip),
            Mistake("no_scheduler", "you did not advance the learning-rate schedule: call scheduler.step() after optimizer.step().", step_no_scheduler),
        ],
    ),
    Exercise(
        "greedy_decode",
        ref.greedy_decode,
        points=2,
        cases=decode_cases,
        mistakes=[
            Mistake("never_stops", "your decoding does not stop at the end token: a sequence that has produced <eos> must get pad_id afterwards, and decoding stops once every sequence has ended.", decode_never_stops),
            Mistake("no_padding_after_eos", "a sequence that has already produced <eos> keeps generating while the others finish; give it pad_id from then on.", decode_no_padding_after_eos),
            Mistake("stops_at_first_eos", "you stopped as soon as one sequence produced <eos>; stop when every sequence has.", decode_stops_at_first_eos),
            Mistake("first_position", "you took the argmax at the first position; the next token is predicted at the last position, logits[:, -1].", decode_first_position),
            Mistake("without_bos", "return the sequences with their leading <bos>, shape (B, 1 + L).", decode_without_bos),
        ],
    ),
    Exercise(
        "exact_match",
        ref.exact_match,
        points=1,
        cases=match_cases,
        mistakes=[
            Mistake("token_accuracy", "you measured the fraction of correct tokens; exact match counts whole sequences that are right up to and including <eos>.", match_token_accuracy),
            Mistake("whole_rows", "you compared the whole rows, so whatever follows <eos> counts; compare only up to and including the first <eos>.", match_whole_rows),
            Mistake("count_not_fraction", "return the fraction of sequences that match (a float in [0, 1]), not their number.", match_count_not_fraction),
            Mistake("prefix", "a prediction must also end where the target ends: compare up to and including <eos>.", match_prefix),
        ],
    ),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("shift_right", "not_shifted"), ("label_smoothed_cross_entropy", "smoothing_on_pad")]
