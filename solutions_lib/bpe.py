"""Byte-pair encoding (BPE) over UTF-8 bytes (notebook 09).

A text is cut into words (each word keeps the whitespace in front of it), every
word becomes its UTF-8 bytes, ids 0..255, and training merges the most frequent
adjacent pair of ids inside a word into a new id: 256, 257, ... Merges never
cross a word boundary.

Every string is a sequence of bytes, so encoding never meets an unknown symbol,
and decode(encode(text, merges), merges) == text for every string, including
characters that never occurred in training.

Merges are a list of pairs: merges[k] = (a, b) means "a followed by b becomes
the token 256 + k". Ties between equally frequent pairs go to the smallest pair
(a, b), compared as tuples: first a, then b.
"""
import re

N_BYTES = 256  # the base vocabulary: one token per byte value

# A word: any whitespace, then a run of non-whitespace; or whitespace at the end.
_WORD = re.compile(r"\s*\S+|\s+")


def split_words(text):
    """Cut `text` into words that keep the whitespace before them.

    "".join(split_words(text)) == text;  split_words("hi  you\n") == ["hi", "  you", "\n"]
    """
    return _WORD.findall(text)


def text_to_words(text):
    """The words of `text` as lists of byte ids (ints in 0..255)."""
    return [list(word.encode("utf-8")) for word in split_words(text)]


def pair_counts(words):
    """How often each adjacent pair of ids occurs, inside words only.

    words: list of lists of ids, one list per word, e.g. [[108, 111, 119], [32, 108, 111]]
    returns: dict {(a, b): count}; "aaa" holds the pair (a, a) twice, and the last id
    of a word never pairs with the first of the next.
    """
    counts = {}
    for ids in words:
        for pair in zip(ids, ids[1:]):
            counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge_pair(ids, pair, new_id):
    """Replace every occurrence of `pair` in `ids` by `new_id`, scanning left to right.

    ids: list of ids; pair: (a, b); new_id: int
    returns: a new list. An occurrence that overlaps one already merged is skipped:
    merge_pair([97, 97, 97], (97, 97), 256) == [256, 97]
    """
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_bpe(text, vocab_size):
    """Learn vocab_size - 256 merges from `text` (fewer if no pair is left).

    Pairs are counted and merged inside the words of split_words(text) only.
    Each step merges the most frequent pair; ties go to the smallest pair (a, b).
    returns merges: list of pairs (a, b); merges[k] creates the token 256 + k.
    """
    words = text_to_words(text)
    merges = []
    while N_BYTES + len(merges) < vocab_size:
        counts = pair_counts(words)
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        new_id = N_BYTES + len(merges)
        words = [merge_pair(ids, pair, new_id) for ids in words]
        merges.append(pair)
    return merges


def encode(text, merges):
    """Token ids of `text`: the UTF-8 bytes of each word of split_words(text),
    with the merges applied in the order they were learned.

    merges: list of pairs; merges[k] = (a, b) creates the token 256 + k
    returns: list of ints in 0 .. 256 + len(merges) - 1
    """
    ranks = {pair: N_BYTES + k for k, pair in enumerate(merges)}  # pair -> its new id; lower = learned earlier
    out = []
    for ids in text_to_words(text):
        while len(ids) > 1:  # merge the earliest learned pair of the word, until none is left
            pair = min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, float("inf")))
            if pair not in ranks:
                break
            ids = merge_pair(ids, pair, ranks[pair])
        out.extend(ids)
    return out


def decode(ids, merges):
    """The text behind token ids: join the bytes of all tokens, then decode them once as UTF-8.

    ids: list of ints; merges: list of pairs, merges[k] = (a, b) creates the token 256 + k
    returns: str; bytes that are not valid UTF-8 (only ids that encode did not produce
    can give them) become U+FFFD (errors="replace").
    """
    vocab = {i: bytes([i]) for i in range(N_BYTES)}
    for k, (a, b) in enumerate(merges):
        vocab[N_BYTES + k] = vocab[a] + vocab[b]
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
