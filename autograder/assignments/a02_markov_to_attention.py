"""Checks for notebook 02: Markov chains, and attention as masking.

Corpora are drawn at check time from a fixed word list and a seed. Each known
mistake is an edit of the reference's source (autograder.mutants).
"""
import torch

import solutions_lib.markov as ref
from autograder.checks.cases import Call, Case, Exercise
from autograder.inputs import Draw, dims, on_the_meta_device

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


def _sentences(seed, n_sentences, n_words):
    """The label of _corpus(seed, n_sentences, n_words): the words it actually uses, which can be fewer than n_words."""
    used = {w.lower() for sentence in _corpus(seed, n_sentences, n_words) for w in sentence.split()}
    return f"{n_sentences} random sentences using {len(used)} distinct words"


def _dtype_label(dtype):
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


# ---------------------------------------------------------------- build_vocab


def _vocab_case(seed, n_sentences, n_words, capitals=False, hidden=False):
    label = _sentences(seed, n_sentences, n_words) + (", capitalised" if capitals else "")
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

    label = f"order {order}, " + _sentences(seed, n_sentences, n_words)
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

    return Case(f"order {order}, " + _sentences(seed, n_sentences, n_words), make, hidden=hidden, grad=False)


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

    return Case(_sentences(seed, n_sentences, n_words), make, hidden=hidden, grad=False)


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


def _votes_case(seed, n_sentences, n_words, dtype=None, hidden=False):
    """With a `dtype`, S comes in it (the part "dtype": the votes keep S's dtype)."""
    def make():
        sentences = _corpus(seed, n_sentences, n_words)
        vocab = ref.build_vocab(sentences)
        context = " ".join(sentences[0].split()[:-1])
        S = ref.skip_transition_table(sentences, vocab)
        return Call((context, S if dtype is None else S.to(dtype), vocab))

    if dtype is None:
        return Case(_sentences(seed, n_sentences, n_words), make, hidden=hidden, grad=False)
    return Case(_sentences(seed, n_sentences, n_words) + f", S of dtype {str(dtype).replace('torch.', '')}", make, part="dtype",
                hidden=hidden, grad=False)


def votes_cases():
    def log_case():
        vocab = ref.build_vocab(LOG_SENTENCES)
        return Call(("check the program log and find out whether it ran", ref.skip_transition_table(LOG_SENTENCES, vocab), vocab))

    return [
        Case("'check the program log and find out whether it ran'", log_case, grad=False), _votes_case(251, 4, 6),
        _votes_case(252, 6, 9), _votes_case(254, 5, 8),  # 254: the first word taken as the latest is no swap of S's indices
        _votes_case(253, 8, 7, hidden=True),
        _votes_case(255, 4, 7, dtype=torch.float64), _votes_case(256, 6, 6, dtype=torch.float64, hidden=True),
        on_the_meta_device(_votes_case(257, 5, 6)), on_the_meta_device(_votes_case(258, 7, 8), hidden=True),
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


# ---------------------------------------------------------------- the exercises

EXERCISES = [
    Exercise("build_vocab", ref.build_vocab, points=1, cases=vocab_cases),
    Exercise("one_hot", ref.one_hot, points=1, cases=one_hot_cases),
    Exercise("transition_matrix", ref.transition_matrix, points=3, cases=transition_cases, parts={"order 1": 2, "order 2": 1}),
    Exercise("next_word_distribution", ref.next_word_distribution, points=2, cases=next_word_cases),
    Exercise("skip_transition_table", ref.skip_transition_table, points=2, cases=skip_table_cases),
    Exercise("skip_pair_votes", ref.skip_pair_votes, points=2, cases=votes_cases, parts={"main": 3, "dtype": 1, "device": 1}),
    Exercise("apply_mask", ref.apply_mask, points=2, cases=mask_cases),
    Exercise("attention_lookup", ref.attention_lookup, points=2, cases=lookup_cases, returns=("output", "weights")),
]

DEMO_MISTAKES = [("transition_matrix", "across_sentences"), ("apply_mask", "wrong_axis")]
