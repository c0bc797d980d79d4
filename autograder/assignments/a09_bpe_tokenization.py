"""Checks for notebook 09: byte-pair encoding over UTF-8 bytes.

The inputs are small corpora generated at check time from fixed seeds: words
built from a few syllables (some with accents), with a Zipf-like frequency, so
that there are frequent pairs, ties and characters beyond ASCII. Texts to
encode also hold characters no corpus contains (emoji, CJK, Greek).
"""
import random

from autograder.core import Call, Case, Exercise, Mistake
from autograder.mutants import swap
from solutions_lib import bpe

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
        _encode_case("a text with unseen characters (an emoji and two others)", lambda: unseen_text(34, 20), lambda: _merges_of(34, 80, 40), part="unseen characters"),
        _encode_case("an empty text", lambda: "", lambda: _merges_of(35, 40, 20), part="unseen characters"),
        _encode_case("hidden", lambda: unseen_text(36, 60), lambda: _merges_of(36, 150, 70), part="unseen characters", hidden=True),
        _encode_case("hidden", lambda: corpus(37, 30, text_seed=9), lambda: _merges_of(37, 90, 60), hidden=True),
    ]


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


# ---------------------------------------------------------------- the catalog

BEST = "min(counts, key=lambda p: (-counts[p], p))"
EARLIEST = 'min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, float("inf")))'
DECODED = 'b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")'

EXERCISES = [
    Exercise("pair_counts", bpe.pair_counts, points=1, cases=pair_counts_cases, mistakes=[
        Mistake("across_words", "you counted pairs across word boundaries (the last id of one word with the first of the next); count inside each word only.", swap("for ids in words:", "for ids in [sum(words, [])]:")),
        Mistake("once_per_word", "you counted each pair once per word; count every occurrence, so 'aaa' holds (a, a) twice.", swap("zip(ids, ids[1:])", "set(zip(ids, ids[1:]))")),
        Mistake("stops_early", "your loop stops one pair early and misses the last pair of every word; a word of n ids has n - 1 pairs.", swap("zip(ids, ids[1:])", "zip(ids, ids[1:-1])")),
    ]),
    Exercise("merge_pair", bpe.merge_pair, points=2, cases=merge_cases, mistakes=[
        Mistake("no_skip", "after a merge you did not skip the second id of the pair, so it is kept or merged again ('aaa' with (a, a) must give [new_id, a]); advance by 2 after a merge.", swap("i += 2", "i += 1")),
        Mistake("right_to_left", "you scanned from right to left; merge from the left, so 'aaa' with (a, a) gives [new_id, a], not [a, new_id].", swap("out, i = [], 0", "ids, pair, out, i = ids[::-1], pair[::-1], [], 0") & swap("return out", "return out[::-1]")),
        Mistake("first_only", "you merged only the first occurrence of the pair; replace every one.", swap("out.append(new_id)\n            i += 2", "return out + [new_id] + ids[i + 2 :]")),
        Mistake("drops_last", "the last id goes missing when it is not part of a merge; when the loop ends one id before the end, append that id too.", swap("while i < len(ids):", "while i < len(ids) - 1:")),
    ]),
    Exercise(
        "train_bpe", bpe.train_bpe, points=3, cases=train_cases, parts={"generated corpora": 3, "stops when no pair is left": 1},
        depends_on=("pair_counts", "merge_pair"),
        mistakes=[
            Mistake("ties_first_seen", "ties are broken by whichever pair was counted first (max(counts, key=counts.get)); the rule is: among equally frequent pairs take the smallest (a, b), e.g. min(counts, key=lambda p: (-counts[p], p)).", swap(BEST, "max(counts, key=counts.get)")),
            Mistake("ties_largest", "among equally frequent pairs you took the largest (a, b); the rule is to take the smallest.", swap(BEST, "max(counts, key=lambda p: (counts[p], p))")),
            Mistake("across_words", "you merged pairs across word boundaries by training on the whole text as one sequence; train on split_words(text), one list of bytes per word.", swap("text_to_words(text)", '[list(text.encode("utf-8"))]')),
            Mistake("vocab_size_as_merges", "vocab_size counts the 256 byte tokens too, so learn vocab_size - 256 merges, not vocab_size.", swap("while N_BYTES + len(merges) < vocab_size", "while len(merges) < vocab_size")),
            Mistake("counted_once", "you counted the pairs once and took the top ones; every merge changes the counts, so recount after each merge.", swap("        counts = pair_counts(words)\n", "") & swap("    merges = []\n", "    merges = []\n    counts = pair_counts(words)\n") & swap(f"pair = {BEST}\n", f"pair = {BEST}\n        del counts[pair]\n")),
        ],
    ),
    Exercise("encode", bpe.encode, points=2, cases=encode_cases, parts={"texts like the corpus": 2, "unseen characters": 1}, depends_on=("merge_pair",), mistakes=[
        Mistake("codepoints", "you started from the characters' code points (ord); start from the UTF-8 bytes, list(word.encode('utf-8')), so that every character, seen or not, becomes ids 0..255.", swap("text_to_words(text)", "[[ord(c) for c in word] for word in split_words(text)]")),
        Mistake("latest_merge_first", "you applied the most recently learned merge first; apply merges in the order they were learned: always the pair with the lowest rank.", swap(EARLIEST, "max(zip(ids, ids[1:]), key=lambda p: ranks.get(p, -1))")),
        Mistake("drops_whitespace", "text.split() throws the whitespace away, so it can never be decoded again; cut the text with split_words, which keeps it.", swap("text_to_words(text)", '[list(word.encode("utf-8")) for word in text.split()]')),
        Mistake("leftmost_pair", "you merged the leftmost pair that has a merge rule; merge the pair that was learned earliest (lowest rank), wherever it is in the word.", swap(EARLIEST, "next((p for p in zip(ids, ids[1:]) if p in ranks), None)")),
    ]),
    Exercise("decode", bpe.decode, points=2, cases=decode_cases, parts={"ids from encode": 2, "any ids": 1}, mistakes=[
        Mistake("per_token", "you decoded each token on its own; a character unseen in training is split over several byte tokens, so join all the bytes first and decode them once.", swap(DECODED, '"".join(vocab[i].decode("utf-8", errors="replace") for i in ids)')),
        Mistake("latin1", "you turned each byte into a character with chr; characters beyond ASCII take 2 to 4 bytes in UTF-8, so join the bytes and call .decode('utf-8').", swap(DECODED, '"".join(chr(byte) for i in ids for byte in vocab[i])')),
        Mistake("pair_reversed", "a merged token (a, b) stands for the bytes of a followed by those of b, not b then a.", swap("vocab[a] + vocab[b]", "vocab[b] + vocab[a]")),
        Mistake("strict", "ids that do not form valid UTF-8 made decode raise; decode with errors='replace' as the docstring says.", swap(', errors="replace"', "")),
    ]),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("merge_pair", "no_skip"), ("decode", "per_token")]
