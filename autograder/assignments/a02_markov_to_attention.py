"""Checks for notebook 02: Markov chains, and attention as masking.

Corpora are drawn at check time from a fixed word list and a seed. Each known
mistake is a complete, self-contained wrong implementation (plain Python and
torch only), written as a learner would write it.
"""
import torch

import solutions_lib.markov as ref
from autograder.core import Call, Case, Exercise, Mistake
from autograder.inputs import Draw, dims

NOTEBOOK = "02_markov_to_attention"

WORDS = ["check", "whether", "the", "battery", "program", "ran", "down", "please", "show", "me", "my", "files", "log", "it"]


def _corpus(seed, n_sentences, n_words, capitals=False):
    """Random sentences of 4 to 8 words drawn from the first n_words of WORDS."""
    r = Draw(seed)
    sentences = []
    for _ in range(n_sentences):
        T = int(r.integers(4, 9).item())
        words = [WORDS[i] for i in r.integers(0, n_words, T).tolist()]
        if capitals:
            words[0] = words[0].capitalize()
        sentences.append(" ".join(words))
    return sentences


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


# ---------------------------------------------------------------- build_vocab


def _vocab_case(seed, n_sentences, n_words, capitals=False, hidden=False):
    label = f"{n_sentences} random sentences over {n_words} words" + (", capitalised" if capitals else "")
    return Case(label, lambda: Call((_corpus(seed, n_sentences, n_words, capitals),)), hidden=hidden, grad=False)


def vocab_cases():
    return [
        Case("the 'show me my ...' sentences", lambda: Call((["Show me my directories please", "Show me my files please", "Show me my photos please"],)), grad=False),
        _vocab_case(201, 3, 6),
        _vocab_case(202, 5, 10, capitals=True),
        _vocab_case(203, 8, 14, capitals=True, hidden=True),
    ]


def vocab_not_sorted(sentences):
    return list(dict.fromkeys(w for s in sentences for w in s.lower().split()))


def vocab_not_lowercased(sentences):
    return sorted({w for s in sentences for w in s.split()})


def vocab_duplicates(sentences):
    return sorted(w for s in sentences for w in s.lower().split())


# ---------------------------------------------------------------- one_hot


def _one_hot_case(seed, T, n_words, hidden=False):
    def make():
        vocab = sorted(WORDS[:n_words])
        r = Draw(seed)
        return Call(([vocab[i] for i in r.integers(0, n_words, T).tolist()], vocab))

    return Case(dims(T=T, V=n_words), make, hidden=hidden, grad=False)


def one_hot_cases():
    return [_one_hot_case(211, 4, 7), _one_hot_case(212, 1, 3), _one_hot_case(213, 9, 9), _one_hot_case(214, 12, 14, hidden=True)]


def one_hot_transposed(words, vocab):
    out = torch.zeros(len(vocab), len(words))
    for t, w in enumerate(words):
        out[vocab.index(w), t] = 1.0
    return out


def one_hot_integer(words, vocab):
    return torch.nn.functional.one_hot(torch.tensor([vocab.index(w) for w in words]), len(vocab))


def one_hot_by_position(words, vocab):
    return torch.eye(len(words), len(vocab))


# ---------------------------------------------------------------- transition_matrix


def _transition_case(seed, n_sentences, n_words, order, hidden=False):
    def make():
        sentences = _corpus(seed, n_sentences, n_words)
        return Call((sentences, ref.build_vocab(sentences)), {"order": order})

    label = f"order {order}, {n_sentences} random sentences over {n_words} words"
    return Case(label, make, part=f"order {order}", hidden=hidden, grad=False)


def _battery_case(order):
    def make():
        sentences = ["check whether the battery ran down please"] * 2 + ["check whether the program ran please"] * 3
        return Call((sentences, ref.build_vocab(sentences)), {"order": order})

    return Case(f"order {order}, the battery / program sentences", make, part=f"order {order}", grad=False)


def transition_cases():
    return [
        _battery_case(1),
        _transition_case(221, 4, 6, 1),
        _transition_case(222, 6, 9, 1),
        _battery_case(2),
        _transition_case(223, 5, 5, 2),
        _transition_case(224, 9, 12, 1, hidden=True),
        _transition_case(225, 8, 7, 2, hidden=True),
    ]


def transition_not_normalised(sentences, vocab, order=1):
    counts = torch.zeros((len(vocab),) * (order + 1))
    for s in sentences:
        ids = [vocab.index(w) for w in s.lower().split()]
        for t in range(order, len(ids)):
            counts[tuple(ids[t - order : t + 1])] += 1
    return counts


def transition_swapped(sentences, vocab, order=1):
    counts = torch.zeros((len(vocab),) * (order + 1))
    for s in sentences:
        ids = [vocab.index(w) for w in s.lower().split()]
        for t in range(order, len(ids)):
            counts[tuple(ids[t - order : t + 1])] += 1
    P = counts / counts.sum(dim=-1, keepdim=True).clamp_min(1)
    return P.transpose(-2, -1)


def transition_across_sentences(sentences, vocab, order=1):
    ids = [vocab.index(w) for s in sentences for w in s.lower().split()]
    counts = torch.zeros((len(vocab),) * (order + 1))
    for t in range(order, len(ids)):
        counts[tuple(ids[t - order : t + 1])] += 1
    return counts / counts.sum(dim=-1, keepdim=True).clamp_min(1)


def transition_normalised_by_column(sentences, vocab, order=1):
    counts = torch.zeros((len(vocab),) * (order + 1))
    for s in sentences:
        ids = [vocab.index(w) for w in s.lower().split()]
        for t in range(order, len(ids)):
            counts[tuple(ids[t - order : t + 1])] += 1
    return counts / counts.sum(dim=-2, keepdim=True).clamp_min(1)


# ---------------------------------------------------------------- next_word_distribution


def _next_word_case(seed, n_sentences, n_words, order, hidden=False):
    def make():
        sentences = _corpus(seed, n_sentences, n_words)
        vocab = ref.build_vocab(sentences)
        words = sentences[-1].split()
        return Call((ref.transition_matrix(sentences, vocab, order), vocab, " ".join(words[:-1])))

    return Case(f"order {order}, {n_sentences} random sentences over {n_words} words", make, hidden=hidden, grad=False)


def _battery_next_case(order):
    def make():
        sentences = ["check whether the battery ran down please"] * 2 + ["check whether the program ran please"] * 3
        vocab = ref.build_vocab(sentences)
        return Call((ref.transition_matrix(sentences, vocab, order), vocab, "check whether the program ran"))

    return Case(f"order {order}, after 'check whether the program ran'", make, grad=False)


def next_word_cases():
    return [
        _battery_next_case(1),
        _battery_next_case(2),
        _next_word_case(231, 4, 6, 1),
        _next_word_case(232, 6, 5, 2),
        _next_word_case(233, 8, 10, 1, hidden=True),
        _next_word_case(234, 7, 6, 2, hidden=True),
    ]


def next_word_first_words(P, vocab, context):
    order = P.dim() - 1
    first = [vocab.index(w) for w in context.lower().split()[:order]]
    return {vocab[c]: p for c, p in enumerate(P[tuple(first)].tolist()) if p > 0}


def next_word_column(P, vocab, context):
    order = P.dim() - 1
    last = [vocab.index(w) for w in context.lower().split()[-order:]]
    if order == 1:
        column = P[:, last[0]]
    else:
        column = P[last[0], :, last[1]]
    return {vocab[c]: p for c, p in enumerate(column.tolist()) if p > 0}


def next_word_keeps_zeros(P, vocab, context):
    order = P.dim() - 1
    last = [vocab.index(w) for w in context.lower().split()[-order:]]
    return {vocab[c]: p for c, p in enumerate(P[tuple(last)].tolist())}


# ---------------------------------------------------------------- skip_transition_table


def _skip_table_case(seed, n_sentences, n_words, hidden=False):
    def make():
        sentences = _corpus(seed, n_sentences, n_words)
        return Call((sentences, ref.build_vocab(sentences)))

    return Case(f"{n_sentences} random sentences over {n_words} words", make, hidden=hidden, grad=False)


LOG_SENTENCES = [
    "check the program log and find out whether it ran please",
    "check the battery log and find out whether it ran down please",
]


def skip_table_cases():
    return [
        Case("the two 'log' sentences", lambda: Call((LOG_SENTENCES, ref.build_vocab(LOG_SENTENCES))), grad=False),
        _skip_table_case(241, 3, 5),
        _skip_table_case(242, 5, 8),
        _skip_table_case(243, 7, 6, hidden=True),
    ]


def skip_table_counts_repeats(sentences, vocab):
    V = len(vocab)
    counts = torch.zeros(V, V, V)
    for s in sentences:
        ids = [vocab.index(w) for w in s.lower().split()]
        for t in range(1, len(ids) - 1):
            for a in ids[:t]:
                counts[a, ids[t], ids[t + 1]] += 1
    return counts / counts.sum(dim=-1, keepdim=True).clamp_min(1)


def skip_table_includes_latest(sentences, vocab):
    V = len(vocab)
    counts = torch.zeros(V, V, V)
    for s in sentences:
        ids = [vocab.index(w) for w in s.lower().split()]
        for t in range(0, len(ids) - 1):
            for a in set(ids[: t + 1]):
                counts[a, ids[t], ids[t + 1]] += 1
    return counts / counts.sum(dim=-1, keepdim=True).clamp_min(1)


def skip_table_pair_swapped(sentences, vocab):
    V = len(vocab)
    counts = torch.zeros(V, V, V)
    for s in sentences:
        ids = [vocab.index(w) for w in s.lower().split()]
        for t in range(1, len(ids) - 1):
            for a in set(ids[:t]):
                counts[ids[t], a, ids[t + 1]] += 1
    return counts / counts.sum(dim=-1, keepdim=True).clamp_min(1)


def skip_table_not_normalised(sentences, vocab):
    V = len(vocab)
    counts = torch.zeros(V, V, V)
    for s in sentences:
        ids = [vocab.index(w) for w in s.lower().split()]
        for t in range(1, len(ids) - 1):
            for a in set(ids[:t]):
                counts[a, ids[t], ids[t + 1]] += 1
    return counts


# ---------------------------------------------------------------- skip_pair_votes


def _votes_case(seed, n_sentences, n_words, hidden=False):
    def make():
        sentences = _corpus(seed, n_sentences, n_words)
        vocab = ref.build_vocab(sentences)
        context = " ".join(sentences[0].split()[:-1])
        return Call((context, ref.skip_transition_table(sentences, vocab), vocab))

    return Case(f"{n_sentences} random sentences over {n_words} words", make, hidden=hidden, grad=False)


def votes_cases():
    def log_case():
        vocab = ref.build_vocab(LOG_SENTENCES)
        return Call(("check the program log and find out whether it ran", ref.skip_transition_table(LOG_SENTENCES, vocab), vocab))

    return [
        Case("'check the program log and find out whether it ran'", log_case, grad=False),
        _votes_case(251, 4, 6),
        _votes_case(252, 6, 9),
        _votes_case(253, 8, 7, hidden=True),
    ]


def votes_counts_repeats(context, S, vocab):
    ids = [vocab.index(w) for w in context.lower().split()]
    votes = torch.zeros(len(vocab), len(vocab))
    for a in ids[:-1]:
        votes[a] += S[a, ids[-1]]
    return votes


def votes_pair_swapped(context, S, vocab):
    ids = [vocab.index(w) for w in context.lower().split()]
    votes = torch.zeros(len(vocab), len(vocab))
    for a in set(ids[:-1]):
        votes[a] = S[ids[-1], a]
    return votes


def votes_first_word_as_latest(context, S, vocab):
    ids = [vocab.index(w) for w in context.lower().split()]
    votes = torch.zeros(len(vocab), len(vocab))
    for a in set(ids[1:]):
        votes[a] = S[a, ids[0]]
    return votes


# ---------------------------------------------------------------- apply_mask


def _mask_case(seed, V, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        votes = torch.softmax(2 * r.randn(V, V, dtype=dtype), dim=-1)
        votes = votes * (r.integers(0, 4, V, 1) > 0)  # some earlier words are absent: zero rows
        mask = r.integers(0, 2, V).bool()
        mask[int(r.integers(0, V).item())] = True
        votes[mask.nonzero()[0, 0]] += 0.1  # at least one kept vote
        return Call((votes, mask))

    return Case(dims(V=V) + _dtype_label(dtype), make, hidden=hidden)


def mask_cases():
    return [_mask_case(261, 5), _mask_case(262, 8), _mask_case(263, 6, dtype=torch.float64), _mask_case(264, 11, hidden=True)]


def mask_wrong_axis(votes, mask):
    kept = (votes * mask[None, :]).sum(dim=0)
    return kept / kept.sum()


def mask_inverted(votes, mask):
    kept = (votes * ~mask[:, None]).sum(dim=0)
    return kept / kept.sum()


def mask_not_normalised(votes, mask):
    return (votes * mask[:, None]).sum(dim=0)


def mask_softmax(votes, mask):
    return torch.softmax((votes * mask[:, None]).sum(dim=0), dim=0)


# ---------------------------------------------------------------- attention_lookup


def _lookup_case(seed, lead, T_q, T_k, d_k, d_v, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        return Call((r.randn(*lead, T_q, d_k, dtype=dtype), r.randn(*lead, T_k, d_k, dtype=dtype), r.randn(*lead, T_k, d_v, dtype=dtype)))

    sizes = (dict(B=lead[0]) if lead else {}) | dict(T_q=T_q, T_k=T_k, d_k=d_k, d_v=d_v)
    return Case(dims(**sizes) + _dtype_label(dtype), make, hidden=hidden)


def lookup_cases():
    return [
        _lookup_case(271, (), 1, 6, 6, 6),
        _lookup_case(272, (2,), 3, 5, 4, 7),
        _lookup_case(273, (3,), 4, 4, 4, 4, dtype=torch.float64),
        _lookup_case(274, (2,), 5, 8, 6, 3, hidden=True),
    ]


def lookup_softmax(query, keys, values):
    weights = torch.softmax(query @ keys.transpose(-2, -1), dim=-1)
    return weights @ values, weights


def lookup_returns_weights(query, keys, values):
    weights = query @ keys.transpose(-2, -1)
    return weights, weights


def lookup_keys_T(query, keys, values):
    weights = query @ keys.T
    return weights @ values, weights


# ---------------------------------------------------------------- the catalog

EXERCISES = [
    Exercise(
        "build_vocab",
        ref.build_vocab,
        points=1,
        cases=vocab_cases,
        mistakes=[
            Mistake("not_sorted", "your vocabulary keeps the order of first appearance; sort it alphabetically.", vocab_not_sorted),
            Mistake("not_lowercased", "lower-case the words first, so that 'Show' and 'show' are one word.", vocab_not_lowercased),
            Mistake("duplicates", "your vocabulary lists a word once per occurrence; keep each distinct word once.", vocab_duplicates),
        ],
    ),
    Exercise(
        "one_hot",
        ref.one_hot,
        points=1,
        cases=one_hot_cases,
        mistakes=[
            Mistake("transposed", "your matrix is (V, T); give one row per word, (T, V).", one_hot_transposed),
            Mistake("integer", "F.one_hot returns integers (int64); convert to float32 so that it can multiply a matrix of probabilities.", one_hot_integer),
            Mistake("by_position", "the 1 goes in the column of the word's index in the vocabulary, not of its position in the sentence.", one_hot_by_position),
        ],
    ),
    Exercise(
        "transition_matrix",
        ref.transition_matrix,
        points=3,
        cases=transition_cases,
        parts={"order 1": 2, "order 2": 1},
        mistakes=[
            Mistake("not_normalised", "you returned counts; divide each row by its total so that the probabilities in a row sum to 1.", transition_not_normalised),
            Mistake("swapped", "rows and columns are swapped: the row is the previous word, the column the next word.", transition_swapped),
            Mistake("across_sentences", "you chained the sentences together, so a sentence's last word became the predecessor of the next sentence's first word; count within each sentence.", transition_across_sentences),
            Mistake("by_column", "you normalised each column; it is each row (one context) that must sum to 1.", transition_normalised_by_column),
        ],
    ),
    Exercise(
        "next_word_distribution",
        ref.next_word_distribution,
        points=2,
        cases=next_word_cases,
        mistakes=[
            Mistake("first_words", "you used the first words of the context; the prediction depends on its last words.", next_word_first_words),
            Mistake("column", "you read a column of P; the distribution of the next word is the row of the last word(s).", next_word_column),
            Mistake("keeps_zeros", "keep only the words with probability > 0.", next_word_keeps_zeros),
        ],
    ),
    Exercise(
        "skip_transition_table",
        ref.skip_transition_table,
        points=2,
        cases=skip_table_cases,
        mistakes=[
            Mistake("counts_repeats", "a word that occurs twice before the latest word still makes one pair with it; count each distinct earlier word once.", skip_table_counts_repeats),
            Mistake("includes_latest", "the earlier words are those strictly before the latest word; you paired the latest word with itself.", skip_table_includes_latest),
            Mistake("pair_swapped", "index the table as S[earlier word, latest word, next word]; you swapped the first two.", skip_table_pair_swapped),
            Mistake("not_normalised", "you returned counts; normalise each pair's row so that it sums to 1.", skip_table_not_normalised),
        ],
    ),
    Exercise(
        "skip_pair_votes",
        ref.skip_pair_votes,
        points=2,
        cases=votes_cases,
        mistakes=[
            Mistake("counts_repeats", "a word that occurs twice before the latest word votes once: its row is S[a, latest], not a sum over its occurrences.", votes_counts_repeats),
            Mistake("pair_swapped", "a vote is S[earlier word, latest word]; you swapped the two indices.", votes_pair_swapped),
            Mistake("first_word_as_latest", "the latest word is the last word of the context, not the first.", votes_first_word_as_latest),
        ],
    ),
    Exercise(
        "apply_mask",
        ref.apply_mask,
        points=2,
        cases=mask_cases,
        mistakes=[
            Mistake("wrong_axis", "you applied the mask to the wrong axis: it selects rows (earlier words), so use mask[:, None].", mask_wrong_axis),
            Mistake("inverted", "your mask polarity is inverted: True marks the votes to keep.", mask_inverted),
            Mistake("not_normalised", "divide the summed votes by their total, so that the result is a probability distribution.", mask_not_normalised),
            Mistake("softmax", "normalise by dividing by the total; a softmax would change the proportions of the votes.", mask_softmax),
        ],
    ),
    Exercise(
        "attention_lookup",
        ref.attention_lookup,
        points=2,
        cases=lookup_cases,
        returns=("output", "weights"),
        mistakes=[
            Mistake("softmax", "this lookup has no softmax: the weights are the products query @ keys^T themselves.", lookup_softmax),
            Mistake("returns_weights", "you returned the weights where the output belongs; return (weights @ values, weights).", lookup_returns_weights),
            Mistake("keys_T", "k.T reverses every axis of a batched tensor; use keys.transpose(-2, -1) to swap only the last two.", lookup_keys_T),
        ],
    ),
]

DEMO_MISTAKES = [("transition_matrix", "across_sentences"), ("apply_mask", "wrong_axis")]
