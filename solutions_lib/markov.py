"""From Markov chains to attention (notebook 02).

Sentences are plain strings; a sentence's words are `sentence.lower().split()`.
A vocabulary is the sorted list of distinct words, V = len(vocab), and a word's
index is its position in that list.
"""
import torch


def build_vocab(sentences):
    """The sorted list of the distinct lower-case words of `sentences`.

    sentences: list of strings; a sentence's words are sentence.lower().split()
    returns: list of V strings, sorted alphabetically
    """
    return sorted({w for s in sentences for w in s.lower().split()})


def one_hot(words, vocab):
    """One row per word, with a single 1 in the column of that word's index in vocab.

    words: list of T words, vocab: list of V words
    returns: float32 tensor (T, V)
    """
    out = torch.zeros(len(words), len(vocab))
    for t, w in enumerate(words):
        out[t, vocab.index(w)] = 1.0
    return out


def transition_matrix(sentences, vocab, order=1):
    """Markov transition probabilities, counted within each sentence.

    order 1: returns P (V, V), P[a, c] = P(next word c | last word a)
    order 2: returns P (V, V, V), P[a, b, c] = P(next word c | last two words a, b)
    Every observed context's row sums to 1; a context never followed by a word has a row of zeros.
    """
    V = len(vocab)
    counts = torch.zeros((V,) * (order + 1))
    for s in sentences:
        ids = [vocab.index(w) for w in s.lower().split()]
        for t in range(order, len(ids)):
            counts[tuple(ids[t - order : t + 1])] += 1
    totals = counts.sum(dim=-1, keepdim=True)
    return counts / totals.clamp_min(1)


def next_word_distribution(P, vocab, context):
    """The model's distribution of the word after `context`.

    P: (V, V) or (V, V, V) from transition_matrix; its order is P.dim() - 1
    context: a string; only its last `order` words matter
    returns: dict {word: probability (a float)} of the words with probability > 0
    """
    order = P.dim() - 1
    last = [vocab.index(w) for w in context.lower().split()[-order:]]
    row = P[tuple(last)]
    return {vocab[c]: p for c, p in enumerate(row.tolist()) if p > 0}


def skip_transition_table(sentences, vocab):
    """Second-order model with skips, counted within each sentence.

    returns S (V, V, V): S[a, b, c] = P(next word c | latest word b, word a somewhere before b).
    Each distinct earlier word counts once per position; pairs never seen have a row of zeros.
    """
    V = len(vocab)
    counts = torch.zeros(V, V, V)
    for s in sentences:
        ids = [vocab.index(w) for w in s.lower().split()]
        for t in range(1, len(ids) - 1):
            for a in set(ids[:t]):
                counts[a, ids[t], ids[t + 1]] += 1
    return counts / counts.sum(dim=-1, keepdim=True).clamp_min(1)


def skip_pair_votes(context, S, vocab):
    """The votes of the earlier words of `context`, each paired with its latest word.

    context: a string; S: (V, V, V) from skip_transition_table
    returns votes (V, V): row a is S[a, latest] if word a occurs before the latest word
    (once, however often it occurs), zeros otherwise; column c is the vote for next word c.
    """
    ids = [vocab.index(w) for w in context.lower().split()]
    earlier, latest = ids[:-1], ids[-1]
    votes = torch.zeros(len(vocab), len(vocab), dtype=S.dtype, device=S.device)
    for a in set(earlier):
        votes[a] = S[a, latest]
    return votes


def apply_mask(votes, mask):
    """Keep the votes of the informative earlier words only, and normalise.

    votes: (V, V), rows = earlier words, columns = next words
    mask: bool (V,), True for the earlier words whose vote counts
    returns: (V,), the summed kept votes divided by their total, a distribution over next words
    (zeros if nothing is kept)
    """
    kept = (votes * mask[:, None]).sum(dim=0)
    return kept / kept.sum().clamp_min(1e-12)


def attention_lookup(query, keys, values):
    """The masked vote as matrix products: weights = query keys^T, output = weights values.

    query: (..., T_q, d_k), keys: (..., T_k, d_k), values: (..., T_k, d_v)
    returns output: (..., T_q, d_v) and weights: (..., T_q, T_k)
    """
    weights = query @ keys.transpose(-2, -1)
    return weights @ values, weights
