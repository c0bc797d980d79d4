"""Characters as token ids, and padded batches (notebooks 03 and 08).

Token 0 is always <pad>, 1 is <bos> (begin of sequence), 2 is <eos> (end).
"""
import torch

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)


class CharVocab:
    """A character-level vocabulary: the three special tokens, then the characters.

    vocab = CharVocab.from_texts(["3 March 2021", "2021-03-03"])
    vocab.encode("2021", eos=True) -> [ids of '2', '0', '2', '1', then eos]
    vocab.decode(ids) -> "2021" (stops at <eos>, skips <pad> and <bos>)
    """

    def __init__(self, chars):
        self.itos = list(SPECIALS) + sorted(set(chars) - set(SPECIALS))
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = (self.stoi[s] for s in SPECIALS)

    @classmethod
    def from_texts(cls, texts):
        return cls({c for text in texts for c in text})

    def __len__(self):
        return len(self.itos)

    def encode(self, text, bos=False, eos=False):
        """text -> list of ids, with <bos> in front and <eos> at the end if asked."""
        ids = [self.stoi[c] for c in text]
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids):
        """ids (list or 1-D tensor) -> text, up to the first <eos>."""
        out = []
        for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(self.itos[i])
        return "".join(out)

    def tokens(self, ids):
        """ids -> list of printable tokens (one per id), for labelling plots."""
        return [self.itos[i] for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids)]


def pad_batch(seqs, pad_id=0):
    """Pad lists of ids to one length.

    seqs: list of B lists of ids
    returns ids: LongTensor (B, T) with T the longest length, padded with pad_id at the end,
    and lengths: LongTensor (B,)
    """
    lengths = [len(s) for s in seqs]
    T = max(lengths)
    ids = torch.tensor([list(s) + [pad_id] * (T - len(s)) for s in seqs], dtype=torch.long)
    return ids, torch.tensor(lengths, dtype=torch.long)
