"""Interpolated modified Kneser-Ney (course_lib.ngram): a distribution, the textbook's, and the stronger counting model.

The reference here is written separately, on Python dicts of tuples and recursion, from the formula:

    P_k(c | h) = (max(N_k(hc) - D_k(N_k(hc)), 0) + (sum over the c' seen after h of D_k(N_k(hc'))) P_{k-1}(c | h'))
                 / (sum over c' of N_k(hc'))

with N_k the raw count at the top level and the number of distinct tokens before hc below it (the text's start
one of them), P_0 = 1 / V, and a context seen followed by nothing passing P_{k-1} on.
"""
import math
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from course_lib.ngram import (bucket, fit_weights, interpolated_nats_per_char, kn_distribution, kn_probabilities,
                              kneser_ney, kneser_ney_nats_per_char, modified_discounts)
from course_lib.text import shakespeare, split
from solutions_lib.gpt.data import markov_nats_per_char


class BruteForceKN:
    """Kneser-Ney by the book, one n-gram at a time: for checking course_lib.ngram, never for speed."""

    def __init__(self, train, order, V):
        self.V, self.n = V, order + 1
        self.tables = {}  # k -> {k-gram tuple: the count level k uses}
        for k in range(1, self.n + 1):
            if k == self.n:
                self.tables[k] = Counter(tuple(train[i : i + k]) for i in range(len(train) - k + 1))
            else:
                before = defaultdict(set)
                for i in range(len(train) - k + 1):
                    before[tuple(train[i : i + k])].add(train[i - 1] if i > 0 else "start of text")
                self.tables[k] = {gram: len(tokens) for gram, tokens in before.items()}
        self.D = {k: self.discounts(table) for k, table in self.tables.items()}

    @staticmethod
    def discounts(table):
        """{1: D1, 2: D2, 3: D3+}: Chen and Goodman's estimates; Y where one is undefined or outside (0, i]."""
        n = Counter(table.values())
        Y = n[1] / (n[1] + 2 * n[2]) if n[1] else 0.5
        D = {}
        for i in (1, 2, 3):
            estimate = i - (i + 1) * Y * n[i + 1] / n[i] if n[i] else Y
            D[i] = estimate if 0 < estimate <= i else Y
        return D

    def p(self, token, context):
        """P(token | context), context a tuple of up to order tokens (its length picks the level)."""
        lower = self.p(token, context[1:]) if context else 1 / self.V
        k = len(context) + 1
        followers = {gram[-1]: count for gram, count in self.tables[k].items() if gram[:-1] == context}
        total = sum(followers.values())
        if total == 0:
            return lower
        D = self.D[k]
        count = followers.get(token, 0)
        kept = count - D[min(count, 3)] if count else 0.0
        freed = sum(D[min(c, 3)] for c in followers.values())
        return (kept + freed * lower) / total


def random_corpus(seed, n, V, used=None):
    """n ids drawn from the first `used` of V ids (default all), with repeats so that counts of 2, 3, 4 occur."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, used or V, (max(n // 3, 1),), generator=g)
    pieces = [base, base[torch.randperm(len(base), generator=g)], torch.randint(0, used or V, (n,), generator=g)]
    return torch.cat(pieces)[:n]


CORPORA = [(seed, n, V, used) for seed, n, V, used in
           [(0, 12, 3, None), (1, 40, 5, None), (2, 60, 7, 4), (3, 150, 6, None), (4, 300, 12, 9), (5, 500, 20, None)]]


@pytest.mark.parametrize("seed, n, V, used", CORPORA)
@pytest.mark.parametrize("order", [0, 1, 2, 3, 4])
def test_the_distribution_sums_to_one_after_seen_and_unseen_contexts(seed, n, V, used, order):
    train = random_corpus(seed, n, V, used)
    if len(train) <= order:
        pytest.skip("fewer tokens than a window")
    model = kneser_ney(train, order, V)
    ids = train.tolist()
    contexts = {"seen": ids[: order], "seen mid-text": ids[n // 2 : n // 2 + order],
                "seen only at the end": ids[len(ids) - order :],  # followed by nothing: passes the lower order on
                "unseen": [V - 1] * order if used else ids[: order][::-1]}
    g = torch.Generator().manual_seed(seed + 100)
    for i in range(5):
        contexts[f"random {i}"] = torch.randint(0, V, (order,), generator=g).tolist()
    for name, context in contexts.items():
        p = kn_distribution(model, context)
        assert p.shape == (V,)
        assert abs(p.sum() - 1) < 1e-12, (name, context, p.sum())
        assert (p > 0).all(), (name, context)  # every token keeps a chance, through the uniform floor


@pytest.mark.parametrize("seed, n, V, used", CORPORA)
@pytest.mark.parametrize("order", [0, 1, 2, 3])
def test_every_probability_is_the_brute_force_one(seed, n, V, used, order):
    train = random_corpus(seed, n, V, used)
    if len(train) <= order:
        pytest.skip("fewer tokens than a window")
    model, book = kneser_ney(train, order, V), BruteForceKN(train.tolist(), order, V)
    for k in range(1, order + 2):
        assert model.discounts[k - 1] == pytest.approx((book.D[k][1], book.D[k][2], book.D[k][3]), abs=1e-12)
    ids = train.tolist()
    g = torch.Generator().manual_seed(seed + 7)
    contexts = [tuple(ids[i : i + order]) for i in range(0, len(ids) - order + 1, max(1, len(ids) // 6))]
    contexts += [tuple(torch.randint(0, V, (order,), generator=g).tolist()) for _ in range(4)]
    for context in contexts:
        expected = [book.p(c, context) for c in range(V)]
        assert kn_distribution(model, list(context)) == pytest.approx(expected, rel=1e-12, abs=1e-15), context
    # held-out scoring: every test token from the `order` before it, summed as nats
    test = random_corpus(seed + 50, 40, V)
    windows = [tuple(test[i : i + order + 1].tolist()) for i in range(len(test) - order)]
    nats = -sum(math.log(book.p(w[-1], w[:-1])) for w in windows)
    score, discounts = kneser_ney_nats_per_char(train, test, order, V, n_chars=100)
    assert score == pytest.approx(nats / 100, rel=1e-12)
    assert kn_probabilities(model, torch.tensor(windows)) == pytest.approx([book.p(w[-1], w[:-1]) for w in windows],
                                                                           rel=1e-12)


def test_lower_orders_count_the_contexts_a_token_follows_not_its_occurrences():
    # token 9 is as frequent as token 3 but only ever follows token 8 ("Francisco" after "San"); token 3 follows
    # many tokens. After a context never seen, the lower order ranks 3 far above 9, as continuation counts say
    # (raw counts would rank them level)
    g, before_3 = torch.Generator().manual_seed(0), [0, 1, 2, 4, 5, 6]
    ids = []
    for i in range(200):
        ids += [8, 9] if i % 2 else [before_3[int(torch.randint(0, 6, (1,), generator=g))], 3]
    train = torch.tensor(ids)
    assert (train == 3).sum() == (train == 9).sum() == 100
    model = kneser_ney(train, 1, 12)
    p = kn_distribution(model, [11])  # 11 never occurs: the unigram level decides
    assert p[3] > 5 * p[9], (p[3], p[9])
    assert kn_distribution(model, [8])[9] > 0.9  # after its one context, 9 is near certain: raw counts at the top


def test_the_discounts_are_chen_and_goodmans():
    n1, n2, n3, n4 = 1000, 400, 200, 120
    Y = n1 / (n1 + 2 * n2)
    assert modified_discounts([n1, n2, n3, n4]) == pytest.approx(
        (1 - 2 * Y * n2 / n1, 2 - 3 * Y * n3 / n2, 3 - 4 * Y * n4 / n3))
    assert modified_discounts([5, 0, 0, 0]) == (1.0, 1.0, 1.0)  # n2 = 0: Y = 1, and the undefined ones fall back to it


def generated_corpus(n_tokens, seed, V=40, n_words=400):
    """Words of 1 to 4 ids (from V) in a sparse word-level Markov chain: each word is followed by one of 8 (Zipf's
    frequencies), nine times in ten, by any word otherwise."""
    rng = np.random.default_rng(seed)
    words = [rng.integers(0, V, rng.integers(1, 5)) for _ in range(n_words)]
    zipf = 1 / np.arange(1, n_words + 1)
    zipf /= zipf.sum()
    following = [rng.choice(n_words, size=8, p=zipf) for _ in range(n_words)]
    out, w = [], 0
    while len(out) < n_tokens:
        w = following[w][rng.integers(8)] if rng.random() < 0.9 else rng.choice(n_words, p=zipf)
        out.extend(words[w])
    return torch.tensor(out[:n_tokens])


@pytest.mark.parametrize("seed", [0, 1])
def test_kneser_ney_beats_add_k_and_jelinek_mercer_on_held_out_tokens(seed):
    ids, V = generated_corpus(66_000, seed), 40
    train, test = ids[:60_000], ids[60_000:]  # the last tenth held out
    per_token = len(test)  # scores in nats per token
    add_k = min(markov_nats_per_char(train, test, order, V, per_token, k=k)
                for order in (0, 1, 2, 3) for k in (0.01, 0.1, 1))  # the best order and k, chosen on the test tokens
    jm, _ = interpolated_nats_per_char(train, test, 3, V, per_token)
    kn, discounts = kneser_ney_nats_per_char(train, test, 3, V, per_token)
    assert len(discounts) == 4 and all(0 < d <= i for level in discounts for i, d in zip((1, 2, 3), level))
    assert kn < add_k - 0.05, (kn, add_k)  # (measured: KN 0.11 to 0.16 below the best add-k)
    assert kn <= jm, (kn, jm)  # (measured: 0.11 below)


def test_too_few_tokens_and_ids_outside_the_vocabulary_are_refused():
    with pytest.raises(ValueError, match="needs at least 4 training tokens"):
        kneser_ney(torch.tensor([1, 2, 3]), 3, 5)
    with pytest.raises(ValueError, match="token ids must lie in 0..4"):
        kneser_ney(torch.tensor([1, 2, 5, 0]), 1, 5)
    model = kneser_ney(torch.tensor([1, 2, 3, 1, 2]), 2, 5)
    with pytest.raises(ValueError, match="reads 2 tokens of context, not 1"):
        kn_distribution(model, [1])


# ---------------------------------------------------------------- Jelinek-Mercer with weights bucketed by the context's count


def test_the_buckets_are_log_spaced_counts():
    assert [bucket(c, 8) for c in (0, 1, 2, 3, 4, 7, 8, 63, 64, 10_000)] == [0, 1, 2, 2, 3, 3, 4, 6, 7, 7]
    assert {bucket(c, 1) for c in (0, 1, 5, 10_000)} == {0}  # one bucket: every context shares the weights


@pytest.mark.parametrize("order", [1, 3])
def test_the_weights_of_every_bucket_sum_to_one(order):
    train = generated_corpus(20_000, 0)
    weights = fit_weights(train, order, 40, buckets=8)
    assert len(weights) == 8 and all(len(row) == order + 2 for row in weights)
    for row in weights:
        assert sum(row) == pytest.approx(1, abs=1e-12) and min(row) >= 0 and row[0] > 0, row  # the uniform keeps a chance


def test_one_bucket_is_one_weight_per_order():
    ids, V = generated_corpus(22_000, 1), 40
    train, test = ids[:20_000], ids[20_000:]
    shared = fit_weights(train, 3, V)
    assert fit_weights(train, 3, V, buckets=1) == shared  # a flat list, the same weights
    score, weights = interpolated_nats_per_char(train, test, 3, V, len(test))
    assert interpolated_nats_per_char(train, test, 3, V, len(test), buckets=1) == (score, weights)
    # the bucketed scoring with every bucket given the shared weights is the unbucketed model
    same, _ = interpolated_nats_per_char(train, test, 3, V, len(test), weights=[shared] * 8)
    assert same == pytest.approx(score, rel=1e-12)


def test_bucketed_weights_score_no_worse_than_one_weight_per_order():
    ids, V = generated_corpus(66_000, 0), 40  # a synthetic corpus, in nats per token
    train, test = ids[:60_000], ids[60_000:]
    shared, _ = interpolated_nats_per_char(train, test, 3, V, len(test))
    bucketed, _ = interpolated_nats_per_char(train, test, 3, V, len(test), buckets=8)
    assert bucketed < shared - 0.03, (bucketed, shared)  # (measured: 0.06 below, 1.185 against 1.247)
    train_text, test_text = split(shakespeare()[:100_000])  # a real one: Shakespeare's bytes, in nats per character
    train, test = (torch.tensor(list(part.encode())) for part in (train_text, test_text))
    shared, _ = interpolated_nats_per_char(train, test, 3, 256, len(test_text))
    bucketed, _ = interpolated_nats_per_char(train, test, 3, 256, len(test_text), buckets=8)
    assert bucketed < shared - 0.02, (bucketed, shared)  # (measured: 1.615 against 1.657)
