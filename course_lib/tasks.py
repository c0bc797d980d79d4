"""The small tasks the notebooks train on, generated in code.

- Notebook 01's long-range dependency: "check whether the battery ... ran" ends
  in "down", "check whether the program ... ran" in "please", with as many
  filler words between as you like. The two sentences are Brandon Rohrer's
  (Transformers from Scratch, 2021, https://e2eml.school/transformers.html),
  also used in notebook 02; the task's shape, a class set by one early symbol
  and then random distractors, is the latching problem of Bengio et al. (1994)
  and experiment 2 of Hochreiter & Schmidhuber (1997).
- Notebook 08's sanity tasks: copying and reversing strings of letters, and
  turning (source, target) strings into padded batches of ids.
"""
import random
import string

import torch

from course_lib.tokens import CharVocab, pad_batch

# ---------------------------------------------------------------- notebook 01: the long-range task

KEYWORDS = {"battery": "down", "program": "please"}
FILLER = ["and", "then", "it", "was", "on", "a", "very", "old", "slow", "machine", "that", "we", "used", "all", "day", "long"]
LONG_RANGE_VOCAB = ["<pad>", "check", "whether", "the", "ran", *KEYWORDS, *FILLER]
ANSWERS = list(KEYWORDS.values())


def long_range_batch(B, distance, generator=None):
    """Sentences "check whether the KEYWORD <distance filler words> ran" and their last word.

    The answer ("down" after battery, "please" after program) depends only on the
    keyword, `distance` + 1 words before the end. (The sentences are Rohrer's, 2021.)
    returns tokens: (B, distance + 5) ids into LONG_RANGE_VOCAB, labels: (B,) ids into ANSWERS
    """
    index = {w: i for i, w in enumerate(LONG_RANGE_VOCAB)}
    labels = torch.randint(0, 2, (B,), generator=generator)
    keyword_ids = torch.tensor([index[k] for k in KEYWORDS])[labels]
    filler_ids = torch.tensor([index[w] for w in FILLER])
    filler = filler_ids[torch.randint(0, len(FILLER), (B, distance), generator=generator)]
    start = torch.tensor([index["check"], index["whether"], index["the"]]).expand(B, 3)
    end = torch.full((B, 1), index["ran"])
    return torch.cat([start, keyword_ids[:, None], filler, end], dim=1), labels


# ---------------------------------------------------------------- notebook 08: copy and reverse


def copy_pairs(n, seed=0, min_len=3, max_len=12, alphabet=string.ascii_lowercase):
    """The copy sanity task: n (text, same text) pairs of random letters."""
    rng = random.Random(seed)
    texts = ["".join(rng.choices(alphabet, k=rng.randint(min_len, max_len))) for _ in range(n)]
    return [(t, t) for t in texts]


def reverse_pairs(n, seed=0, min_len=3, max_len=12, alphabet=string.ascii_lowercase):
    """The reverse sanity task: n (text, text reversed) pairs of random letters."""
    return [(s, s[::-1]) for s, _ in copy_pairs(n, seed, min_len, max_len, alphabet)]


def letters_vocab():
    """A vocabulary for the copy and reverse tasks: the specials and a-z."""
    return CharVocab(string.ascii_lowercase)


def encode_pairs(pairs, vocab):
    """(source, target) strings -> src (B, T_src) and tgt (B, T_tgt) LongTensors.

    Sources are plain characters; every target ends with <eos>. Both are padded with <pad>.
    """
    src, _ = pad_batch([vocab.encode(s) for s, _ in pairs], vocab.pad_id)
    tgt, _ = pad_batch([vocab.encode(t, eos=True) for _, t in pairs], vocab.pad_id)
    return src, tgt
