"""The strongest counting model of the course: an interpolated n-gram (notebook 10 compares its GPT with it).

An add-k model of order n uses only its longest context, and falls back to the uniform guess
wherever that context is rare. Interpolation mixes the estimates of every order instead:

    P(c | h) = λ_n P_n(c | last n tokens of h) + ... + λ_1 P_1(c | last token) + λ_0 P_0(c) + λ_u / V

where P_j is the plain relative frequency, count(context, c) / count(context) (0 for a context
never seen), and the weights λ sum to 1. They are fitted on the training tokens alone (Jelinek and
Mercer, 1980): counted on the first nine tenths of them, the weights that best predict the last tenth
(by expectation-maximisation); the final model counts all of them.
"""
from collections import Counter

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


def fit_weights(train_ids, order, V, steps=50):
    """λ_u, λ_0, ..., λ_order: counted on the first 90 % of train_ids, fitted by EM to predict the last 10 %."""
    cut = int(0.9 * len(train_ids))
    joint, context = counts(train_ids[:cut], order)
    p = _components(joint, context, list(_windows(train_ids[cut - order :].tolist(), order + 1)), V)
    weights = torch.full((order + 2,), 1 / (order + 2), dtype=torch.float64)
    for _ in range(steps):
        share = weights * p  # each window's probability under each component, weighted
        weights = (share / share.sum(1, keepdim=True)).mean(0)
    weights[0] = max(weights[0].item(), 1e-6)  # a token never counted keeps a chance
    return (weights / weights.sum()).tolist()


def interpolated_nats_per_char(train_ids, test_ids, order, V, n_chars, weights=None):
    """Held-out nats per character of the interpolated n-gram model of `order` tokens of context.

    train_ids, test_ids: (n,) int64 tensors; V: the vocabulary size; n_chars: the characters test_ids encodes.
    weights: λ_u, λ_0, ..., λ_order (default: fit_weights(train_ids, order, V), from the training tokens only).
    Every token of test_ids after the first `order` is predicted from the `order` tokens before it.
    returns: (nats per character, the weights)
    """
    weights = weights or fit_weights(train_ids, order, V)
    joint, context = counts(train_ids, order)
    p = _components(joint, context, list(_windows(test_ids.tolist(), order + 1)), V) @ torch.tensor(weights, dtype=torch.float64)
    return -p.log().sum().item() / n_chars, weights
