"""Training the encoder-decoder Transformer (notebook 08).

The pieces of one training step, in the order they are used:

    tgt_in = shift_right(tgt, bos_id)             teacher forcing: the decoder reads <bos> y_1 .. y_{T-1}
    src_mask, tgt_mask = make_masks(src, tgt_in)  padding and causal masks, True = allowed
    logits = model(src, tgt_in, src_mask, tgt_mask)
    loss = label_smoothed_cross_entropy(logits, tgt)
    lr = warmup_lr(step, d_model, warmup)         the schedule of "Attention Is All You Need"

then greedy_decode and exact_match to measure what the model learned, and beam_search (with
GNMT's length_penalty), the decoder of the paper, to find a likelier target than greedy's.
Token ids follow course_lib.tokens: <pad> = 0, <bos> = 1, <eos> = 2.
"""
import contextlib

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------- one training step


def shift_right(tgt, bos_id=1):
    """The decoder's input for teacher forcing: <bos>, then the targets without the last one.

    tgt: (B, T) target ids (ending with <eos>, then padding)
    returns: (B, T), tgt_in[:, 0] = bos_id and tgt_in[:, t] = tgt[:, t - 1]
    """
    bos = torch.full_like(tgt[:, :1], bos_id)
    return torch.cat([bos, tgt[:, :-1]], dim=1)


def make_masks(src, tgt_in, pad_id=0):
    """The boolean masks of a batch (True = may attend).

    src: (B, T_src), tgt_in: (B, T_tgt) token ids
    returns src_mask: (B, 1, T_src), True at real source tokens (for the encoder's
    self-attention and the decoder's cross-attention); and
    tgt_mask: (B, T_tgt, T_tgt), causal and True at real (non-pad) target keys.
    """
    src_mask = (src != pad_id).unsqueeze(1)
    T = tgt_in.size(1)
    causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).tril()
    tgt_mask = causal & (tgt_in != pad_id).unsqueeze(1)
    return src_mask, tgt_mask


def label_smoothed_cross_entropy(logits, target, smoothing=0.1, pad_id=0):
    """Cross-entropy against smoothed targets, averaged over the non-padding tokens.

    logits: (B, T, V); target: (B, T) ids
    q puts 1 - smoothing on the target, smoothing / (V - 2) on every other token
    except pad_id, and 0 on pad_id.
    returns: a 0-dim tensor, -sum_v q_v log p_v averaged over positions whose target is not pad_id
    """
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)
    q = torch.full_like(log_p, smoothing / (V - 2))
    q.scatter_(-1, target.unsqueeze(-1), 1.0 - smoothing)
    q[..., pad_id] = 0.0
    per_token = -(q * log_p).sum(-1)
    return per_token[target != pad_id].mean()


def warmup_lr(step, d_model, warmup=4000):
    """The learning rate of "Attention Is All You Need" at a step (step 0 counts as step 1).

    lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5): linear growth for
    `warmup` steps, peaking at (d_model * warmup)^-0.5, then decay as 1/sqrt(step).
    returns: float
    """
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def train_step(model, optimizer, scheduler, src, tgt, bos_id=1, pad_id=0, smoothing=0.1, clip=1.0,
               autocast=contextlib.nullcontext, scaler=None):
    """One optimisation step on one batch, with teacher forcing.

    model(src, tgt_in, src_mask, tgt_mask) -> logits (B, T_tgt, V)
    src: (B, T_src), tgt: (B, T_tgt) ids; scheduler: a torch.optim.lr_scheduler, stepped once
    autocast: a context manager for the forward pass and the loss (mixed precision: torch.autocast, section 8)
    scaler: a torch.amp.GradScaler, which float16 autocast needs; None: no scaling
    Clears old gradients, back-propagates the label-smoothed loss (scaled), unscales the gradients,
    clips their norm at `clip`, updates the parameters, then the learning rate.
    returns: the loss of this batch (float), before the update
    """
    scaler = scaler or torch.amp.GradScaler(enabled=False)  # a scaler that scales nothing
    model.train()
    tgt_in = shift_right(tgt, bos_id)
    src_mask, tgt_mask = make_masks(src, tgt_in, pad_id)
    with autocast():
        logits = model(src, tgt_in, src_mask, tgt_mask)
        loss = label_smoothed_cross_entropy(logits, tgt, smoothing, pad_id)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    return loss.item()


# ---------------------------------------------------------------- using the trained model


def greedy_decode(model, src, max_len, bos_id=1, eos_id=2, pad_id=0):
    """Generate target ids one at a time, always taking the most likely next token.

    model.encode(src, src_mask) -> memory; model.decode(memory, ys, src_mask) -> logits (B, len(ys), V)
    src: (B, T_src) ids; src_mask = (src != pad_id).unsqueeze(1)
    The source is encoded once; each step feeds everything generated so far to the
    decoder and appends the argmax of its last position. A sequence that has produced
    <eos> gets pad_id from then on; stop when every sequence has ended, or after
    max_len new tokens. Runs in eval mode, without gradients.
    returns: (B, 1 + L) ids starting with <bos>, L <= max_len
    """
    model.eval()
    with torch.no_grad():
        src_mask = (src != pad_id).unsqueeze(1)
        memory = model.encode(src, src_mask)
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(memory, ys, src_mask)
            next_id = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            ys = torch.cat([ys, next_id[:, None]], dim=1)
            done = done | (next_id == eos_id)
            if done.all():
                break
    return ys


def exact_match(pred, target, eos_id=2):
    """The fraction of sequences predicted exactly, up to and including the first <eos>.

    pred: (B, T_p) ids (without <bos>); target: (B, T_t) ids ending with <eos>, then padding.
    What follows the first <eos> is ignored; a prediction with no <eos> never matches.
    returns: float in [0, 1]
    """
    hits = 0
    for p, t in zip(pred.tolist(), target.tolist()):
        p = p[: p.index(eos_id) + 1] if eos_id in p else p + [None]
        hits += p == t[: t.index(eos_id) + 1]
    return hits / len(pred)


# ---------------------------------------------------------------- beam search


def length_penalty(length, alpha):
    """GNMT's length penalty (Wu et al., 2016): lp(|Y|) = ((5 + |Y|) / 6) ** alpha.

    length: |Y|, the number of tokens generated (<eos> included, <bos> not), an int >= 1
    alpha: a float >= 0; alpha = 0 gives 1 for every length (plain log-probabilities),
    larger alpha favours longer hypotheses. lp(1) = 1 for every alpha.
    returns: float
    """
    return ((5 + length) / 6) ** alpha


def beam_search(model, src, beam_size, max_len, alpha=0.6, bos_id=1, eos_id=2, pad_id=0):
    """The likeliest target found by a beam of `beam_size` hypotheses, ranked by GNMT's length penalty.

    model.encode(src, src_mask) -> memory (1, T_src, d_model);
    model.decode(memory, ys, src_mask) -> logits (k, len(ys), V) for k hypotheses ys (k, 1 + t)
    src: (1, T_src) ids of one source; src_mask = (src != pad_id).unsqueeze(1)
    A hypothesis <bos> y_1 .. y_t scores log p(y_1 .. y_t | src), the sum of log_softmax over its steps.
    The source is encoded once. Each step t runs the decoder once on the k live hypotheses, adds each
    token's log-probability to its hypothesis's score, giving (k, V) candidates, and keeps the best
    n = beam_size - len(finished) of all k * V. A kept candidate ending in <eos> is finished: it is set
    aside with score / length_penalty(t, alpha); the others stay live. Stop when the beam is empty
    (beam_size hypotheses finished) or after max_len tokens; the live ones then count as finished too,
    with length max_len. Runs in eval mode, without gradients.
    returns: (ys, score): ys (1, 1 + L) ids of the finished hypothesis with the highest score,
    starting with <bos>, L <= max_len; score (float) its log-probability / length_penalty(L, alpha)
    """
    model.eval()
    with torch.no_grad():
        src_mask = (src != pad_id).unsqueeze(1)
        memory = model.encode(src, src_mask)
        ys = torch.full((1, 1), bos_id, dtype=torch.long, device=src.device)  # (k, 1 + t) live hypotheses
        scores = torch.zeros(1, device=src.device)  # (k,) their summed log-probabilities
        finished = []  # (ids (1 + L,), score / length_penalty(L, alpha))
        for t in range(1, max_len + 1):
            k = ys.size(0)
            logits = model.decode(memory.expand(k, -1, -1), ys, src_mask.expand(k, -1, -1))
            candidates = scores[:, None] + F.log_softmax(logits[:, -1], dim=-1)  # (k, V)
            V, n = candidates.size(1), beam_size - len(finished)
            top, index = candidates.flatten().topk(min(n, k * V))  # the n best of all k * V candidates
            parent, token = index // V, index % V
            ys = torch.cat([ys[parent], token[:, None]], dim=1)
            ends = token == eos_id
            finished += [(y, s / length_penalty(t, alpha)) for y, s in zip(ys[ends], top[ends])]
            ys, scores = ys[~ends], top[~ends]
            if ys.size(0) == 0:
                break
        finished += [(y, s / length_penalty(max_len, alpha)) for y, s in zip(ys, scores)]
        best, score = max(finished, key=lambda f: f[1])
    return best[None], score.item()
