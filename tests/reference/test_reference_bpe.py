"""solutions_lib's byte-pair encoding: exact round trips, shorter sequences, determinism, the tie rule."""
import random

import pytest

from solutions_lib import bpe

CORPUS = (
    "the lowest tower is lower than the newest tower; the newer towers grow wider and wider.\n"
    "A café in Zürich serves crème brûlée to the lowest bidder, and the bidders grow newer.\n"
) * 3


def random_text(seed, n=80):
    """Random unicode: ASCII, accents, Greek, CJK, emoji, astral symbols, control characters, whitespace."""
    r = random.Random(seed)
    ranges = [(0x20, 0x7E), (0xC0, 0x17F), (0x391, 0x3C9), (0x4E00, 0x4E80), (0x1F600, 0x1F64F), (0x1D400, 0x1D4FF), (0x0, 0x1F)]
    chars = []
    for _ in range(n):
        lo, hi = r.choice(ranges)
        chars.append(chr(r.randint(lo, hi)))
        if r.random() < 0.2:
            chars.append(r.choice([" ", "  ", "\n", "\t", "\u3000"]))
    return "".join(chars)


@pytest.fixture(scope="module")
def merges():
    return bpe.train_bpe(CORPUS, 256 + 60)


def test_split_words_keeps_every_character():
    for seed in range(20):
        text = random_text(seed)
        assert "".join(bpe.split_words(text)) == text
    assert bpe.split_words("hi  you\n") == ["hi", "  you", "\n"]
    assert bpe.split_words("") == []


@pytest.mark.parametrize("seed", range(25))
def test_round_trip_on_random_unicode(merges, seed):
    text = random_text(seed)
    ids = bpe.encode(text, merges)
    assert all(0 <= i < 256 + len(merges) for i in ids)
    assert bpe.decode(ids, merges) == text


@pytest.mark.parametrize("text", ["", " ", "\n\n", "🙂", "🚀 to the moon 🌕", "日本語のテキスト", "naïve façade", "\x00\x01", "a" * 50, "  lead and trail  "])
def test_round_trip_on_edge_cases(merges, text):
    assert bpe.decode(bpe.encode(text, merges), merges) == text
    assert bpe.decode(bpe.encode(text, []), []) == text


def test_unseen_characters_stay_as_bytes(merges):
    assert bpe.encode("🙂", merges) == list("🙂".encode("utf-8"))


def test_merges_reduce_length():
    text = CORPUS
    previous = len(text.encode("utf-8"))
    assert len(bpe.encode(text, [])) == previous
    for n in [5, 20, 60]:
        m = bpe.train_bpe(CORPUS, 256 + n)
        assert len(m) == n
        length = len(bpe.encode(text, m))
        assert length < previous
        previous = length


def test_encoding_the_training_text_matches_training():
    # Encoding the training text with all merges reproduces the words training ended with.
    m = bpe.train_bpe(CORPUS, 256 + 40)
    words = bpe.text_to_words(CORPUS)
    for k, pair in enumerate(m):
        words = [bpe.merge_pair(w, pair, 256 + k) for w in words]
    assert bpe.encode(CORPUS, m) == [t for w in words for t in w]


def test_training_is_deterministic():
    assert bpe.train_bpe(CORPUS, 300) == bpe.train_bpe(CORPUS, 300)
    # and independent of the order in which pairs are first met
    assert bpe.train_bpe("x ab cd ab cd", 262) == bpe.train_bpe("x cd ab cd ab", 262)


def test_ties_go_to_the_smallest_pair():
    # In "bab", "ba" and "ab" occur once each: (97, 98) = "ab" is smaller than (98, 97) = "ba".
    assert bpe.train_bpe("bab", 257) == [(97, 98)]
    assert bpe.train_bpe("zyz", 257) == [(121, 122)]
    # In "ba ab" the space pair (32, 97) is as frequent as both and smaller still.
    assert bpe.train_bpe("ba ab", 257) == [(32, 97)]


def test_merge_pair_does_not_merge_overlaps_twice():
    assert bpe.merge_pair([97, 97, 97], (97, 97), 256) == [256, 97]
    assert bpe.merge_pair([97, 97, 97, 97], (97, 97), 256) == [256, 256]
    assert bpe.pair_counts([[97, 97, 97]]) == {(97, 97): 2}


def test_pairs_never_cross_words():
    assert bpe.pair_counts([[1, 2], [3]]) == {(1, 2): 1}
    m = bpe.train_bpe("ab ab ab", 300)
    tokens = [bpe.decode([256 + k], m) for k in range(len(m))]
    # no token ends in a non-space and continues with the space of the next word
    assert tokens and all(" " not in t[1:] for t in tokens)


def test_training_stops_when_no_pair_is_left():
    assert bpe.train_bpe("ab ab", 1000) == [(97, 98), (32, 256)]
    assert bpe.train_bpe("", 1000) == []
    assert bpe.train_bpe(CORPUS, 256) == []


def test_decode_replaces_invalid_utf8():
    assert bpe.decode([0xE6, 0x97], []) == "\ufffd"
    assert bpe.decode([104, 0xFF, 105], []) == "h\ufffdi"
