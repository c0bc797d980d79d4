"""The counting models notebook 10 compares its GPT with: interpolated n-grams, Jelinek-Mercer and Kneser-Ney.

An add-k model of order n uses only its longest context, and falls back to the uniform guess
wherever that context is rare. Interpolation mixes the estimates of every order instead:

    P(c | h) = λ_n P_n(c | last n tokens of h) + ... + λ_1 P_1(c | last token) + λ_0 P_0(c) + λ_u / V

where P_j is the plain relative frequency, count(context, c) / count(context) (0 for a context
never seen), and the weights λ sum to 1. This is the simplest form of Jelinek and Mercer's interpolation
(1980): one weight per order, shared by every context, fitted on the training tokens alone: counted on the
first nine tenths of them, the weights that best predict the last tenth (by expectation-maximisation); the
final model counts all of them. Bahl, Jelinek and Mercer (1983) bucket the weights by how often the context
was seen, so that a context seen often can trust its own counts and a rare one lean on the shorter contexts
(Chen and Goodman, 1999, describe and compare this bucketing; their own variant buckets by a context's count
divided by the number of different tokens seen after it). Bucketed by the count as Bahl et al. did,
fit_weights(..., buckets=8) fits one set of weights per bucket of the longest context's count (0, 1, 2-3,
4-7, ..., 64 and more), by the same EM on the same split. Bucketed, the 4-gram reaches 1.605 held-out nats per
character on the course's tokens, against 1.644 with one weight per order.

Kneser-Ney smoothing (interpolated, with the three discounts of Chen and Goodman's modified version, 1999) is
the stronger counting model: kneser_ney fits it, kn_probabilities and kn_distribution score it,
kneser_ney_nats_per_char measures it on held-out tokens. It subtracts a discount from every count (D1, D2
or D3+ for a count of 1, 2, or 3 and more) instead of mixing relative frequencies with weights shared by every
context, and gives the mass it frees to the next lower order, whose counts are continuation counts (the
number of distinct tokens seen before an n-gram). On the course's BPE-768 tokens of Tiny Shakespeare it
scores 1.580, 1.537, 1.530 and 1.530 held-out nats per character as a 3-, 4-, 5- and 6-gram, against 1.644
for the interpolated 4-gram above (1.605 bucketed). Notebook 10 chooses the order on a validation slice of the
training tokens, never on the held-out text: fitted on their first nine tenths, the 3- to 6-gram score 1.533,
1.503, 1.501 and 1.501 on the last tenth, and the 6-gram, ahead of the 5-gram by less than a thousandth, is
chosen.
"""
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch


def _windows(ids, n):
    """Every window of n consecutive ids, as tuples."""
    return zip(*(ids[j : len(ids) - n + 1 + j] for j in range(n)))


def counts(train_ids, order):
    """count[j][window] for windows of j + 1 tokens, j = 0..order, and the contexts' counts context[j][w[:-1]]."""
    ids = train_ids.tolist()
    joint = [Counter(_windows(ids, j + 1)) for j in range(order + 1)]
    context = []
    for table in joint:
        c = Counter()
        for w, n in table.items():
            c[w[:-1]] += n
        context.append(c)
    return joint, context


def _components(joint, context, windows, V):
    """(len(windows), order + 2): for each window, the uniform guess and each order's relative frequency."""
    order = len(joint) - 1
    rows = []
    for w in windows:
        row = [1 / V]
        for j in range(order + 1):
            seen = context[j][w[order - j : -1]]
            row.append(joint[j][w[order - j :]] / seen if seen else 0.0)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def bucket(count, buckets):
    """The bucket of a context seen `count` times: 0 for never, then log-spaced, b for a count in 2^(b-1)..2^b - 1
    (1, 2-3, 4-7, ...), the last bucket (buckets - 1) taking every count from there up; buckets=1: bucket 0 for all."""
    return min(count.bit_length(), buckets - 1)


def _buckets(context, windows, buckets):
    """(len(windows),) int64: the bucket of each window's longest context, by its count in `context`."""
    order = len(context) - 1
    return torch.tensor([bucket(context[order][w[:-1]], buckets) for w in windows], dtype=torch.int64)


def fit_weights(train_ids, order, V, steps=50, buckets=1):
    """λ_u, λ_0, ..., λ_order: counted on the first 90 % of train_ids, fitted by EM to predict the last 10 %.

    buckets=1: one weight per order, shared by every context. buckets > 1: one set of weights for each bucket of
    the longest context's count (see `bucket`), each fitted on the windows of the last 10 % in its bucket; a
    bucket with none there keeps the uniform weights it started from.
    returns: a list of order + 2 weights summing to 1 (buckets=1), or a list of `buckets` such lists
    """
    cut = int(0.9 * len(train_ids))
    joint, context = counts(train_ids[:cut], order)
    windows = list(_windows(train_ids[cut - order :].tolist(), order + 1))
    p = _components(joint, context, windows, V)
    b = _buckets(context, windows, buckets).to(p.device)  # (m,): each window's bucket
    seen = torch.bincount(b, minlength=buckets).to(p)[:, None]  # (buckets, 1): how many windows each bucket has
    weights = p.new_full((buckets, order + 2), 1 / (order + 2))  # float64, on p's device
    for _ in range(steps):
        share = weights[b] * p  # each window's probability under each component, weighted by its bucket's weights
        share = share / share.sum(1, keepdim=True)
        summed = torch.zeros_like(weights).index_add_(0, b, share)  # the shares summed over each bucket's windows
        weights = torch.where(seen > 0, summed / seen.clamp(min=1), weights)
    weights[:, 0] = weights[:, 0].clamp(min=1e-6)  # a token never counted keeps a chance
    weights = (weights / weights.sum(1, keepdim=True)).tolist()
    return weights[0] if buckets == 1 else weights


def interpolated_nats_per_char(train_ids, test_ids, order, V, n_chars, weights=None, buckets=1):
    """Held-out nats per character of the interpolated n-gram model of `order` tokens of context.

    train_ids, test_ids: (n,) int64 tensors; V: the vocabulary size; n_chars: the characters test_ids encodes.
    weights: λ_u, λ_0, ..., λ_order, or one such list per bucket of the longest context's count
    (default: fit_weights(train_ids, order, V, buckets=buckets), from the training tokens only).
    Every token of test_ids after the first `order` is predicted from the `order` tokens before it.
    returns: (nats per character, the weights)
    """
    weights = weights or fit_weights(train_ids, order, V, buckets=buckets)
    joint, context = counts(train_ids, order)
    windows = list(_windows(test_ids.tolist(), order + 1))
    components = _components(joint, context, windows, V)
    table = components.new_tensor(weights).reshape(-1, order + 2)  # (buckets, order + 2)
    p = (components * table[_buckets(context, windows, len(table)).to(components.device)]).sum(1)
    return -p.log().sum().item() / n_chars, weights


# ---------------------------------------------------------------- interpolated Kneser-Ney


@dataclass
class KneserNey:
    """An interpolated modified Kneser-Ney model, fitted by kneser_ney; level k (index k - 1) holds the k-grams.

    keys[k - 1]: (n_k,) int64, sorted: the k-gram types seen in training, each as (the index of its first k - 1
        tokens among keys[k - 2]) * V + its last token (for k = 1: the token, keys[0] = 0..V-1).
    counts[k - 1]: (n_k,) float64: the raw count of each k-gram at the top level k = order + 1, its continuation
        count (how many distinct tokens precede it in the training tokens, the text's start counting as one) below.
    totals[k - 1]: (n_{k-1},) float64: counts summed over each context (the k-grams sharing their first k - 1
        tokens); for k = 1 one entry, the empty context. A context followed by nothing has total 0.
    freed[k - 1]: (n_{k-1},) float64: D1 N1(h) + D2 N2(h) + D3+ N3+(h), the count mass the discounts take from
        context h (N_i(h): how many k-grams of context h have count i; N3+: 3 or more), given to level k - 1.
    discounts[k - 1]: (D1, D2, D3+), subtracted from counts of 1, 2, and 3 or more.
    """

    V: int
    order: int
    keys: list
    counts: list
    totals: list
    freed: list
    discounts: list


def modified_discounts(count_of_counts):
    """(D1, D2, D3+) of modified Kneser-Ney from n_1..n_4, how many n-gram types occur once, twice, 3 and 4 times.

    Y = n1 / (n1 + 2 n2), D1 = 1 - 2 Y n2 / n1, D2 = 2 - 3 Y n3 / n2, D3+ = 3 - 4 Y n4 / n3 (Chen and Goodman, 1999).
    On tiny corpora, where an n_i is 0 or D_i leaves (0, i], D_i is Y (0.5 if n1 = 0): a discount in (0, i] keeps
    every count of i or more non-negative, which is what keeps the distribution summing to 1.
    """
    n1, n2, n3, n4 = (float(c) for c in count_of_counts)
    Y = n1 / (n1 + 2 * n2) if n1 > 0 else 0.5
    D = []
    for i, (n_i, n_next) in enumerate(((n1, n2), (n2, n3), (n3, n4)), start=1):
        d = i - (i + 1) * Y * n_next / n_i if n_i > 0 else Y
        D.append(d if 0 < d <= i else Y)
    return tuple(D)


def _lookup(keys, key):
    """The position of each of `key` in the sorted `keys`, -1 where it is absent (or negative)."""
    at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
    return np.where((key >= 0) & (keys[at] == key), at, -1)


def kneser_ney(train_ids, order, V):
    """Fit interpolated modified Kneser-Ney with `order` tokens of context (windows of order + 1) on train_ids.

    train_ids: (n,) int64 CPU tensor (or array) of ids in 0..V-1, n > order. Counting is vectorised (numpy's
    unique and bincount, one pass a level): a 5-gram on Tiny Shakespeare's 417,690 training tokens takes 0.2 s.

        P_k(c | h) = (max(N_k(h c) - D_k(N_k(h c)), 0) + freed_k(h) P_{k-1}(c | h')) / total_k(h)

    for the k-gram h c (h: its k - 1 tokens of context, h' = h less its first token), down to P_0(c) = 1 / V;
    a context with total 0 (never seen followed by a token) passes P_{k-1} on unchanged. N_k is the raw count
    at the top level, k = order + 1, and the continuation count below it: the number of distinct tokens seen
    before h c (the start of the text counting as one). A lower order speaks only through the mass the
    discounts free, that is, for the tokens the longer context has rarely or never seen next; it should then
    say how readily c follows a context it was not counted after, which the number of different contexts c
    has followed measures and its raw frequency does not (a token frequent only after one word, as
    "Francisco" after "San", is a poor guess elsewhere).
    Each level has its own discounts (modified_discounts), from the count-of-counts of its own N_k.
    returns: KneserNey
    """
    x = np.asarray(train_ids, dtype=np.int64)
    n = order + 1
    if order < 0 or len(x) < n:
        raise ValueError(f"an order-{order} model needs at least {n} training tokens, not {len(x)}")
    if len(x) and (x.min() < 0 or x.max() >= V):
        raise ValueError(f"token ids must lie in 0..{V - 1}")
    # ids[k - 1][s]: the index among keys[k - 1] of the k-gram that starts at position s (s = 0..len(x) - k);
    # first[k - 1][j]: a position where the k-gram type j starts
    keys, ids, first = [np.arange(V, dtype=np.int64)], [x], [None]
    for k in range(2, n + 1):
        key = ids[-1][: len(x) - k + 1] * V + x[k - 1 :]  # the (k-1)-gram at s, then the token after it
        types, at, index = np.unique(key, return_index=True, return_inverse=True)
        keys.append(types)
        ids.append(index.reshape(-1))
        first.append(at)
    counts, totals, freed, discounts = [], [], [], []
    for k in range(1, n + 1):
        size = len(keys[k - 1])
        if k == n:  # raw counts
            c = np.bincount(ids[k - 1], minlength=size)
        else:  # continuation counts: the distinct (k+1)-grams that end in it, i.e. distinct tokens before it
            after = ids[k - 1][first[k] + 1]  # each (k+1)-gram type's last k tokens, which start one later
            c = np.bincount(after, minlength=size)
            c[ids[k - 1][0]] += 1  # the k-gram that opens the text: its start, one more distinct left context
        c = c.astype(np.float64)
        D = modified_discounts([(c == i).sum() for i in (1, 2, 3, 4)])
        context = keys[k - 1] // V if k > 1 else np.zeros(size, dtype=np.int64)
        contexts = len(keys[k - 2]) if k > 1 else 1
        discount = np.select([c == 1, c == 2, c >= 3], D, 0.0)
        counts.append(c)
        totals.append(np.bincount(context, weights=c, minlength=contexts))
        freed.append(np.bincount(context, weights=discount, minlength=contexts))
        discounts.append(D)
    return KneserNey(V, order, keys, counts, totals, freed, discounts)


def kn_probabilities(model, windows):
    """P(last token | the tokens before it) under the KneserNey `model`, for each window.

    windows: (m, order + 1) int64 CPU tensor or array of ids in 0..V-1, the context then the token predicted.
    returns: (m,) float64 array
    """
    w = np.asarray(windows, dtype=np.int64)
    if w.ndim != 2 or w.shape[1] != model.order + 1:
        raise ValueError(f"windows must be (m, {model.order + 1}), not {tuple(w.shape)}")
    p = np.full(len(w), 1.0 / model.V)  # level 0: the uniform guess
    previous = None  # (m, order + 1): the index among keys[k - 2] of the (k-1)-gram ending at each column, -1: unseen
    for k in range(1, model.order + 2):
        if k == 1:
            current, context = w, np.zeros(len(w), dtype=np.int64)
        else:  # the k-gram ending at column t: the (k-1)-gram ending at t - 1, then token t
            current = np.full_like(w, -1)
            joined = np.where(previous[:, :-1] >= 0, previous[:, :-1] * model.V + w[:, 1:], -1)
            current[:, 1:] = _lookup(model.keys[k - 1], joined)
            context = previous[:, -2]  # the k - 1 tokens before the predicted one
        seen = current[:, -1] >= 0
        c = np.where(seen, model.counts[k - 1][np.maximum(current[:, -1], 0)], 0.0)
        D1, D2, D3 = model.discounts[k - 1]
        kept = np.maximum(c - np.select([c == 1, c == 2, c >= 3], [D1, D2, D3], 0.0), 0.0)
        h = np.maximum(context, 0)
        total = np.where(context >= 0, model.totals[k - 1][h], 0.0)
        p = np.where(total > 0, (kept + model.freed[k - 1][h] * p) / np.where(total > 0, total, 1.0), p)
        previous = current
    return p


def kn_distribution(model, context):
    """The distribution of the next token after `context`, a sequence of ids whose last model.order count.

    returns: (V,) float64, summing to 1
    """
    context = np.asarray(context, dtype=np.int64).reshape(-1)
    context = context[len(context) - model.order :] if model.order else context[:0]
    if len(context) != model.order:
        raise ValueError(f"an order-{model.order} model reads {model.order} tokens of context, not {len(context)}")
    windows = np.concatenate([np.tile(context, (model.V, 1)), np.arange(model.V)[:, None]], axis=1)
    return kn_probabilities(model, windows)


def kneser_ney_nats_per_char(train_ids, test_ids, order, V, n_chars, model=None):
    """Held-out nats per character of interpolated modified Kneser-Ney with `order` tokens of context.

    train_ids, test_ids: (n,) int64 tensors; V: the vocabulary size; n_chars: the characters test_ids encodes.
    model: a KneserNey fitted on train_ids (default: kneser_ney(train_ids, order, V)).
    Every token of test_ids after the first `order` is predicted from the `order` tokens before it, as in
    interpolated_nats_per_char.
    returns: (nats per character, each level's discounts (D1, D2, D3+), from unigrams up)
    """
    model = model or kneser_ney(train_ids, order, V)
    test = np.asarray(test_ids, dtype=np.int64)
    if len(test) <= order:
        raise ValueError(f"an order-{order} model needs more than {order} test tokens")
    windows = np.lib.stride_tricks.sliding_window_view(test, order + 1)  # (len(test) - order, order + 1)
    return float(-np.log(kn_probabilities(model, windows)).sum() / n_chars), model.discounts
