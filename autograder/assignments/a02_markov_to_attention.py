"""Checks for notebook 02: Markov chains, and attention as masking.

Corpora are drawn at check time from a fixed word list and a seed. Each known
mistake is an edit of the reference's source (autograder.mutants).
"""
import torch

import solutions_lib.markov as ref
from autograder.core import Call, Case, Exercise, Mistake
from autograder.inputs import Draw, dims
from autograder.mutants import swap

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
        _vocab_case(201, 3, 6), _vocab_case(202, 5, 10, capitals=True), _vocab_case(203, 8, 14, capitals=True, hidden=True),
    ]


# ---------------------------------------------------------------- one_hot


def _one_hot_case(seed, T, n_words, hidden=False):
    def make():
        vocab = sorted(WORDS[:n_words])
        r = Draw(seed)
        return Call(([vocab[i] for i in r.integers(0, n_words, T).tolist()], vocab))

    return Case(dims(T=T, V=n_words), make, hidden=hidden, grad=False)


def one_hot_cases():
    return [_one_hot_case(211, 4, 7), _one_hot_case(212, 1, 3), _one_hot_case(213, 9, 9), _one_hot_case(214, 12, 14, hidden=True)]


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
        _battery_case(1), _transition_case(221, 4, 6, 1), _transition_case(222, 6, 9, 1), _battery_case(2),
        _transition_case(223, 5, 5, 2), _transition_case(224, 9, 12, 1, hidden=True), _transition_case(225, 8, 7, 2, hidden=True),
    ]


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
        _battery_next_case(1), _battery_next_case(2), _next_word_case(231, 4, 6, 1), _next_word_case(232, 6, 5, 2),
        _next_word_case(233, 8, 10, 1, hidden=True), _next_word_case(234, 7, 6, 2, hidden=True),
    ]


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
        _skip_table_case(241, 3, 5), _skip_table_case(242, 5, 8), _skip_table_case(243, 7, 6, hidden=True),
    ]


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
        Case("'check the program log and find out whether it ran'", log_case, grad=False), _votes_case(251, 4, 6),
        _votes_case(252, 6, 9), _votes_case(253, 8, 7, hidden=True),
    ]


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


# ---------------------------------------------------------------- attention_lookup


def _lookup_case(seed, lead, T_q, T_k, d_k, d_v, dtype=torch.float32, hidden=False):
    def make():
        r = Draw(seed)
        return Call((r.randn(*lead, T_q, d_k, dtype=dtype), r.randn(*lead, T_k, d_k, dtype=dtype), r.randn(*lead, T_k, d_v, dtype=dtype)))

    sizes = (dict(B=lead[0]) if lead else {}) | dict(T_q=T_q, T_k=T_k, d_k=d_k, d_v=d_v)
    return Case(dims(**sizes) + _dtype_label(dtype), make, hidden=hidden)


def lookup_cases():
    return [
        _lookup_case(271, (), 1, 6, 6, 6), _lookup_case(272, (2,), 3, 5, 4, 7),
        _lookup_case(273, (3,), 4, 4, 4, 4, dtype=torch.float64), _lookup_case(274, (2,), 5, 8, 6, 3, hidden=True),
    ]


# ---------------------------------------------------------------- the catalog

EXERCISES = [
    Exercise("build_vocab", ref.build_vocab, points=1, cases=vocab_cases, mistakes=[
        Mistake("not_sorted", "your vocabulary keeps the order of first appearance; sort it alphabetically.", swap("sorted({", "list(dict.fromkeys(") & swap("})", "))")),
        Mistake("not_lowercased", "lower-case the words first, so that 'Show' and 'show' are one word.", swap("s.lower().split()", "s.split()")),
        Mistake("duplicates", "your vocabulary lists a word once per occurrence; keep each distinct word once.", swap("({", "(") & swap("})", ")")),
    ]),
    Exercise("one_hot", ref.one_hot, points=1, cases=one_hot_cases, mistakes=[
        Mistake("transposed", "your matrix is (V, T); give one row per word, (T, V).", swap("zeros(len(words), len(vocab))", "zeros(len(vocab), len(words))") & swap("out[t, vocab.index(w)]", "out[vocab.index(w), t]")),
        Mistake("integer", "F.one_hot returns integers (int64); convert to float32 so that it can multiply a matrix of probabilities.", swap("zeros(len(words), len(vocab))", "zeros(len(words), len(vocab), dtype=torch.int64)")),
        Mistake("by_position", "the 1 goes in the column of the word's index in the vocabulary, not of its position in the sentence.", swap("out[t, vocab.index(w)]", "out[t, t]")),
    ]),
    Exercise("transition_matrix", ref.transition_matrix, points=3, cases=transition_cases, parts={"order 1": 2, "order 2": 1}, mistakes=[
        Mistake("not_normalised", "you returned counts; divide each row by its total so that the probabilities in a row sum to 1.", swap(" / totals.clamp_min(1)")),
        Mistake("swapped", "rows and columns are swapped: the row is the previous word, the column the next word.", swap("counts / totals.clamp_min(1)", "(counts / totals.clamp_min(1)).transpose(-2, -1)")),
        Mistake("across_sentences", "you chained the sentences together, so a sentence's last word became the predecessor of the next sentence's first word; count within each sentence.", swap("for s in sentences:", 'for s in [" ".join(sentences)]:')),
        Mistake("by_column", "you normalised each column; it is each row (one context) that must sum to 1.", swap("sum(dim=-1", "sum(dim=-2")),
    ]),
    Exercise("next_word_distribution", ref.next_word_distribution, points=2, cases=next_word_cases, mistakes=[
        Mistake("first_words", "you used the first words of the context; the prediction depends on its last words.", swap("split()[-order:]", "split()[:order]")),
        Mistake("column", "you read a column of P; the distribution of the next word is the row of the last word(s).", swap("P[tuple(last)]", "P.transpose(-2, -1)[tuple(last)]")),
        Mistake("keeps_zeros", "keep only the words with probability > 0.", swap(" if p > 0}", "}")),
    ]),
    Exercise("skip_transition_table", ref.skip_transition_table, points=2, cases=skip_table_cases, mistakes=[
        Mistake("counts_repeats", "a word that occurs twice before the latest word still makes one pair with it; count each distinct earlier word once.", swap("set(ids[:t])", "ids[:t]")),
        Mistake("includes_latest", "the earlier words are those strictly before the latest word; you paired the latest word with itself.", swap("range(1,", "range(0,") & swap("ids[:t]", "ids[: t + 1]")),
        Mistake("pair_swapped", "index the table as S[earlier word, latest word, next word]; you swapped the first two.", swap("counts[a, ids[t], ids[t + 1]]", "counts[ids[t], a, ids[t + 1]]")),
        Mistake("not_normalised", "you returned counts; normalise each pair's row so that it sums to 1.", swap(" / counts.sum(dim=-1, keepdim=True).clamp_min(1)")),
    ]),
    Exercise("skip_pair_votes", ref.skip_pair_votes, points=2, cases=votes_cases, mistakes=[
        Mistake("counts_repeats", "a word that occurs twice before the latest word votes once: its row is S[a, latest], not a sum over its occurrences.", swap("set(earlier)", "earlier") & swap("votes[a] = ", "votes[a] += ")),
        Mistake("pair_swapped", "a vote is S[earlier word, latest word]; you swapped the two indices.", swap("= S[a, latest]", "= S[latest, a]")),
        Mistake("first_word_as_latest", "the latest word is the last word of the context, not the first.", swap("ids[:-1], ids[-1]", "ids[1:], ids[0]")),
    ]),
    Exercise("apply_mask", ref.apply_mask, points=2, cases=mask_cases, mistakes=[
        Mistake("wrong_axis", "you applied the mask to the wrong axis: it selects rows (earlier words), so use mask[:, None].", swap("mask[:, None]", "mask[None, :]")),
        Mistake("inverted", "your mask polarity is inverted: True marks the votes to keep.", swap("mask[:, None]", "~mask[:, None]")),
        Mistake("not_normalised", "divide the summed votes by their total, so that the result is a probability distribution.", swap(" / kept.sum().clamp_min(1e-12)")),
        Mistake("softmax", "normalise by dividing by the total; a softmax would change the proportions of the votes.", swap("kept / kept.sum().clamp_min(1e-12)", "torch.softmax(kept, dim=0)")),
    ]),
    Exercise("attention_lookup", ref.attention_lookup, points=2, cases=lookup_cases, returns=("output", "weights"), mistakes=[
        Mistake("softmax", "this lookup has no softmax: the weights are the products query @ keys^T themselves.", swap("query @ keys.transpose(-2, -1)", "torch.softmax(query @ keys.transpose(-2, -1), dim=-1)")),
        Mistake("returns_weights", "you returned the weights where the output belongs; return (weights @ values, weights).", swap("return weights @ values,", "return weights,")),
        Mistake("keys_T", "k.T reverses every axis of a batched tensor; use keys.transpose(-2, -1) to swap only the last two.", swap("keys.transpose(-2, -1)", "keys.T")),
    ]),
]

DEMO_MISTAKES = [("transition_matrix", "across_sentences"), ("apply_mask", "wrong_axis")]
