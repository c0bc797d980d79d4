"""Checks for notebook 09: byte-pair encoding over UTF-8 bytes.

The inputs are small corpora generated at check time from fixed seeds: words
built from a few syllables (some with accents), with a Zipf-like frequency, so
that there are frequent pairs, ties and characters beyond ASCII. Texts to
encode also hold characters no corpus contains (emoji, CJK, Greek).
"""
import random

from autograder.checks.cases import Call, Case, Exercise
from solutions_lib import bpe
from solutions_lib.bpe import N_BYTES, merge_pair  # what encode_whole_text calls, as pasted beside the reference

NOTEBOOK = "09_bpe_tokenization"

SYLLABLES = ["lo", "w", "er", "est", "new", "wid", "ing", "th", "e", "an", "d", "ca", "fé", "ü", "ber", "ñ", "a"]
UNSEEN = ["🙂", "日本語", "Ωμέγα", "🚀🚀", "ø", "\t", "naïve…", "𝔅"]


def corpus(seed, n_words, n_lexicon=12, text_seed=None):
    """A text of `n_words` words drawn from a lexicon of made-up words (Zipf-like frequencies).

    The lexicon depends on `seed` only; `text_seed` draws another text from the same lexicon.
    """
    r = random.Random(seed)
    lexicon = ["".join(r.choice(SYLLABLES) for _ in range(r.randint(1, 3))) for _ in range(n_lexicon)]
    if text_seed is not None:
        r = random.Random(text_seed)
    weights = [1 / (k + 1) for k in range(n_lexicon)]
    words = r.choices(lexicon, weights, k=n_words)
    text = ""
    for w in words:
        text += r.choice([" ", " ", " ", " ", "  ", "\n", ", "]) + w
    return text[1:] + r.choice(["", ".", " \n"])


def unseen_text(seed, n_words):
    """A text in the style of corpus(seed, ...) with characters that no corpus contains."""
    r = random.Random(seed + 1000)
    pieces = corpus(seed, n_words, text_seed=seed + 500).split(" ")
    for extra in ["🙂"] + r.sample(UNSEEN[1:], 2):
        pieces.insert(r.randrange(len(pieces) + 1), extra)
    return " ".join(pieces)


def _words_after(text, n_merges):
    """The corpus as lists of ids after its first `n_merges` merges."""
    words = bpe.text_to_words(text)
    for k, pair in enumerate(bpe.train_bpe(text, bpe.N_BYTES + n_merges)):
        words = [bpe.merge_pair(w, pair, bpe.N_BYTES + k) for w in words]
    return words


# ---------------------------------------------------------------- pair_counts


def _pair_counts_case(label, make_words, hidden=False):
    return Case(label, lambda: Call((make_words(),)), hidden=hidden, grad=False)


def pair_counts_cases():
    return [
        _pair_counts_case("the words ['low', ' lower', ' aaa'] as bytes", lambda: bpe.text_to_words("low lower aaa")),
        _pair_counts_case("a generated corpus of 40 words, as bytes", lambda: bpe.text_to_words(corpus(1, 40))),
        _pair_counts_case("a generated corpus of 60 words after 10 merges", lambda: _words_after(corpus(2, 60), 10)),
        _pair_counts_case("words of one id and no words", lambda: [[97], [], [98, 98]]),
        _pair_counts_case("no words at all", lambda: []),
        _pair_counts_case("hidden", lambda: _words_after(corpus(3, 80), 20), hidden=True),
    ]


# ---------------------------------------------------------------- merge_pair


def _merge_case(label, ids, pair, new_id, hidden=False):
    return Case(label, lambda: Call((list(ids), tuple(pair), new_id)), hidden=hidden, grad=False)


def _random_ids(seed, n, alphabet=3):
    r = random.Random(seed)
    return [97 + r.randrange(alphabet) for _ in range(n)]


def merge_cases():
    cases = [
        _merge_case("'aaa' with the pair (a, a)", [97, 97, 97], (97, 97), 256),
        _merge_case("'aaaa' with the pair (a, a)", [97, 97, 97, 97], (97, 97), 256),
        _merge_case("'abcab' with the pair (a, b)", [97, 98, 99, 97, 98], (97, 98), 300),
        _merge_case("'xab' with the pair (a, b), at the end", [120, 97, 98], (97, 98), 257),
        _merge_case("a pair that does not occur", [97, 98, 99], (99, 97), 256),
        _merge_case("an empty list", [], (97, 98), 256),
    ]
    for seed, pair in [(11, (97, 98)), (12, (98, 98)), (13, (97, 97))]:
        cases.append(_merge_case(f"random ids from 'abc', length 30, pair {pair}", _random_ids(seed, 30), pair, 256 + seed))
    cases.append(_merge_case("hidden", _random_ids(14, 50, alphabet=2), (98, 98), 400, hidden=True))
    return cases


# ---------------------------------------------------------------- train_bpe


def _train_case(label, make_text, vocab_size, part="generated corpora", hidden=False):
    return Case(label, lambda: Call((make_text(), vocab_size)), part=part, hidden=hidden, grad=False)


def train_cases():
    return [
        _train_case("'low lower lowest newer wider', vocab_size=266", lambda: "low lower lowest newer wider", 266),
        _train_case("a generated corpus of 80 words, vocab_size=280", lambda: corpus(21, 80), 280),
        _train_case("a generated corpus of 150 words, vocab_size=300", lambda: corpus(22, 150), 300),
        _train_case("'aaaa aaaa', vocab_size=260", lambda: "aaaa aaaa", 260),
        _train_case("'ab ab', vocab_size=300 (runs out of pairs)", lambda: "ab ab", 300, part="stops when no pair is left"),
        _train_case("an empty text, vocab_size=300", lambda: "", 300, part="stops when no pair is left"),
        _train_case("vocab_size=256: no merges", lambda: corpus(23, 20), 256, part="stops when no pair is left"),
        _train_case("hidden", lambda: corpus(24, 200, n_lexicon=20), 320, hidden=True),
        _train_case("hidden", lambda: "xyz xyz xy", 400, part="stops when no pair is left", hidden=True),
    ]


# ---------------------------------------------------------------- encode


def _merges_of(seed, n_words, n_merges):
    return bpe.train_bpe(corpus(seed, n_words), bpe.N_BYTES + n_merges)


def _encode_case(label, make_text, make_merges, part="texts like the corpus", hidden=False):
    return Case(label, lambda: Call((make_text(), make_merges())), part=part, hidden=hidden, grad=False)


def encode_cases():
    return [
        _encode_case("a sentence of its own corpus, 30 merges", lambda: corpus(31, 15), lambda: _merges_of(31, 60, 30)),
        _encode_case("a new text in the corpus' style, 50 merges", lambda: corpus(31, 25, text_seed=7), lambda: _merges_of(31, 60, 50)),
        _encode_case("'aaaaaaa' with the merges of 'aaaa aaaa'", lambda: "aaaaaaa", lambda: bpe.train_bpe("aaaa aaaa", 260)),
        _encode_case("no merges at all", lambda: "café ünter", lambda: []),
        # the leftmost pair with a rule (cd) is not the earliest learned (de): merging leftmost first shows here
        _encode_case("'abcde' with the merges ab, de, cd, bc, learned in that order", lambda: "abcde",
                     lambda: [tuple(map(ord, pair)) for pair in ("ab", "de", "cd", "bc")]),
        # merges that join the end of a word to the next word's start: applied to the whole text at once, they join
        # across words, which word by word they never do
        _encode_case("'to be or not to be' with the merges (e, space), (space, o), (b, e), learned elsewhere",
                     lambda: "to be or not to be", lambda: [tuple(map(ord, pair)) for pair in ("e ", " o", "be")]),
        _encode_case("hidden", lambda: "ab ab ab", lambda: [tuple(map(ord, pair)) for pair in ("b ", " a", "ab")], hidden=True),
        _encode_case("a text with unseen characters (an emoji and two others)", lambda: unseen_text(34, 20), lambda: _merges_of(34, 80, 40), part="unseen characters"),
        _encode_case("an empty text", lambda: "", lambda: _merges_of(35, 40, 20), part="unseen characters"),
        _encode_case("hidden", lambda: unseen_text(36, 60), lambda: _merges_of(36, 150, 70), part="unseen characters", hidden=True),
        _encode_case("hidden", lambda: corpus(37, 30, text_seed=9), lambda: _merges_of(37, 90, 60), hidden=True),
    ]


# encode's merges replayed over the whole text's bytes, one merge after another: no edit of the loop over words
# expresses it (the TOML file names it)
def encode_whole_text(text, merges):
    ids = list(text.encode("utf-8"))
    for k, pair in enumerate(merges):
        ids = merge_pair(ids, tuple(pair), N_BYTES + k)
    return ids


# ---------------------------------------------------------------- decode


def _decode_case(label, make_ids, seed, n_words, n_merges, part="ids from encode", hidden=False):
    def make():
        merges = _merges_of(seed, n_words, n_merges)
        return Call((make_ids(merges), merges))

    return Case(label, make, part=part, hidden=hidden, grad=False)


def _random_token_ids(seed, n):
    def make(merges):
        r = random.Random(seed)
        return [r.randrange(bpe.N_BYTES + len(merges)) for _ in range(n)]

    return make


def decode_cases():
    return [
        _decode_case("the encoding of a sentence of the corpus, 30 merges", lambda m: bpe.encode(corpus(41, 15), m), 41, 60, 30),
        _decode_case("the encoding of a text with unseen characters, 40 merges", lambda m: bpe.encode(unseen_text(42, 20), m), 42, 80, 40),
        _decode_case("no ids", lambda m: [], 43, 20, 10),
        _decode_case("random ids (not always valid UTF-8), 20 merges", _random_token_ids(44, 40), 44, 60, 20, part="any ids"),
        _decode_case("hidden", lambda m: bpe.encode(unseen_text(45, 60), m), 45, 150, 70, hidden=True),
        _decode_case("hidden", _random_token_ids(46, 80), 46, 100, 50, part="any ids", hidden=True),
    ]


# ---------------------------------------------------------------- the exercises


EXERCISES = [
    Exercise("pair_counts", bpe.pair_counts, points=1, cases=pair_counts_cases),
    Exercise("merge_pair", bpe.merge_pair, points=2, cases=merge_cases),
    Exercise(
        "train_bpe", bpe.train_bpe, points=3, cases=train_cases, parts={"generated corpora": 3, "stops when no pair is left": 1},
        depends_on=("pair_counts", "merge_pair"),
    ),
    Exercise("encode", bpe.encode, points=2, cases=encode_cases, parts={"texts like the corpus": 2, "unseen characters": 1}, depends_on=("merge_pair",)),
    Exercise("decode", bpe.decode, points=2, cases=decode_cases, parts={"ids from encode": 2, "any ids": 1}),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("merge_pair", "no_skip"), ("decode", "per_token")]
