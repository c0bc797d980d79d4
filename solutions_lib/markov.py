"""From Markov chains to attention (notebook 02).

Sentences are plain strings; a sentence's words are `sentence.lower().split()`.
A vocabulary is the sorted list of distinct words, V = len(vocab), and a word's
index is its position in that list.
"""
import torch


def build_vocab(sentences):
    """The sorted list of the distinct lower-case words of `sentences` (a list of strings)."""
    return sorted({w for s in sentences for w in s.lower().split()})


def one_hot(words, vocab):
    """One row per word, with a single 1 in the column of that word.

    words: list of T words, vocab: list of V words -> float32 (T, V)
    """
    index = {w: i for i, w in enumerate(vocab)}
    out = torch.zeros(len(words), len(vocab))
    for t, w in enumerate(words):
        out[t, index[w]] = 1.0
    return out


def transition_matrix(sentences, vocab, order=1):
    """Markov transition probabilities counted within each sentence.

    order 1: P (V, V) with P[a, c] = P(next word c | last word a)
    order 2: P (V, V, V) with P[a, b, c] = P(next word c | last two words a, b)
    A context never followed by a word (such as a sentence's last word) has a row of zeros.
    """
    index = {w: i for i, w in enumerate(vocab)}
    V = len(vocab)
    counts = torch.zeros((V,) * (order + 1))
    for s in sentences:
        ids = [index[w] for w in s.lower().split()]
        for t in range(order, len(ids)):
            counts[tuple(ids[t - order : t + 1])] += 1
    totals = counts.sum(dim=-1, keepdim=True)
    return counts / totals.clamp_min(1)


def next_word_distribution(P, vocab, context):
    """Read the next-word probabilities after `context` from a transition matrix.

    P: (V, V) or (V, V, V) from transition_matrix; its order is P.dim() - 1
    context: a string; only its last `order` words matter
    returns {word: probability} for the words of probability > 0
    """
    order = P.dim() - 1
    index = {w: i for i, w in enumerate(vocab)}
    last = [index[w] for w in context.lower().split()[-order:]]
    row = P[tuple(last)]  # (V,)
    return {vocab[c]: p for c, p in enumerate(row.tolist()) if p > 0}


def skip_transition_table(sentences, vocab):
    """Second-order model with skips: how each pair (earlier word, latest word) votes.

    returns S (V, V, V): S[a, b, c] = P(next word c | latest word b, word a somewhere before b),
    counted within each sentence, each distinct earlier word once per position.
    Pairs never seen have a row of zeros.
    """
    index = {w: i for i, w in enumerate(vocab)}
    V = len(vocab)
    counts = torch.zeros(V, V, V)
    for s in sentences:
        ids = [index[w] for w in s.lower().split()]
        for t in range(1, len(ids) - 1):
            for a in set(ids[:t]):
                counts[a, ids[t], ids[t + 1]] += 1
    return counts / counts.sum(dim=-1, keepdim=True).clamp_min(1)


def skip_pair_votes(context, S, vocab):
    """The votes of every earlier word of `context`, paired with its latest word.

    context: a string, S: (V, V, V) from skip_transition_table
    returns votes (V, V): row a is S[a, latest] when word a occurs before the latest word,
    zeros otherwise; column c is the vote for next word c.
    """
    index = {w: i for i, w in enumerate(vocab)}
    *earlier, latest = [index[w] for w in context.lower().split()]
    votes = torch.zeros(len(vocab), len(vocab), dtype=S.dtype)
    for a in set(earlier):
        votes[a] = S[a, latest]
    return votes


def apply_mask(votes, mask):
    """Keep the votes of the informative earlier words only, and normalise.

    votes: (V, V), rows = earlier words, columns = next words
    mask: bool (V,), True for the earlier words whose vote counts
    returns: (V,) the next-word distribution, summing to 1 (zeros if nothing is kept)
    """
    kept = (votes * mask[:, None]).sum(dim=0)
    return kept / kept.sum().clamp_min(1e-12)


def attention_lookup(query, keys, values):
    """The masked vote as a matrix product: weights = query keys^T, output = weights values.

    query: (..., T_q, d_k), keys: (..., T_k, d_k), values: (..., T_k, d_v)
    returns output (..., T_q, d_v) and weights (..., T_q, T_k)
    """
    weights = query @ keys.transpose(-2, -1)
    return weights @ values, weights
