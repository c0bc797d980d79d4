"""The data of notebook 10: Tiny Shakespeare as BPE tokens (notebook 09's merges, learned on the
training part only), random windows, and the held-out loss in nats per character, for the GPT and
for the Markov baselines of notebook 02."""
import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from solutions_lib import bpe
from solutions_lib.gpt import lm_loss


# ---------------------------------------------------------------- data


def get_batch(data, block_size, B, generator=None, device=None):
    """B random windows of block_size tokens, and the token after each position.

    data: (n,) LongTensor of token ids, n > block_size, on any device; generator: a CPU torch.Generator
    returns x, y: (B, block_size) each, on `device` (default: data's); y[:, t] = x[:, t + 1] within a window, and
    y[:, -1] the token after the window: every window lies inside data.
    """
    if len(data) <= block_size:
        raise ValueError(f"{len(data)} tokens are too few for windows of block_size + 1 = {block_size + 1}")
    starts = torch.randint(len(data) - block_size, (B,), generator=generator).to(data.device)
    index = starts[:, None] + torch.arange(block_size, device=data.device)  # (B, block_size)
    x, y = data[index], data[index + 1]
    if device is not None:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    return x, y


def nats_per_char(loss_per_token, n_tokens, n_chars):
    """A mean cross-entropy per token (nats) as nats per character: the total, loss x tokens, over characters.

    Perplexity per character is exp of it; bits per character, it divided by ln 2.
    """
    return loss_per_token * n_tokens / n_chars


@torch.no_grad()
def evaluate(model, data, block_size, n_chars, batch_size=64):
    """Held-out nats per character: the model's loss over the whole token stream `data`.

    data: (n,) LongTensor; it is cut into non-overlapping windows of block_size inputs (the last
    one shorter), so every token but the first is predicted once, from the tokens before it in
    its window. n_chars: the characters the stream encodes. Leaves the model in the mode it found.
    returns: float, nats_per_char(mean loss, n - 1, n_chars)
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    n = (len(data) - 1) // block_size  # full windows
    x, y = data[: n * block_size].view(n, block_size), data[1 : n * block_size + 1].view(n, block_size)
    batches = [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, n, batch_size)]
    if len(data) - 1 > n * block_size:  # the rest
        batches.append((data[n * block_size : -1][None], data[n * block_size + 1 :][None]))
    total = 0.0
    for xb, yb in batches:
        logits, _ = model(xb.to(device))
        total += lm_loss(logits, yb.to(device)).item() * yb.numel()
    model.train(was_training)
    n_tokens = len(data) - 1
    return nats_per_char(total / n_tokens, n_tokens, n_chars)


def markov_nats_per_char(train_ids, test_ids, order, V, n_chars, k=0.1):
    """Held-out nats per character of an n-gram model with add-k smoothing, on the same tokens.

    order: how many tokens of context: 0 unigram, 1 bigram, 2 trigram.
    P(c | context) = (count(context, c) + k) / (count(context) + k V), counted on train_ids
    (a context never seen gets the uniform 1/V). Every token of test_ids after the first
    `order` is predicted from the `order` tokens before it.
    train_ids, test_ids: (n,) LongTensors; n_chars: the characters test_ids encodes
    returns: float, nats_per_char(mean cross-entropy, predicted tokens, n_chars)
    """
    if V ** (order + 1) >= 2**63:
        raise ValueError(f"V^(order + 1) = {V}^{order + 1} does not fit in int64")
    if min(len(train_ids), len(test_ids)) <= order:
        raise ValueError(f"an order-{order} model needs more than {order} tokens of training and of test data")
    train_context, train_joint = _ngram_codes(train_ids, order, V)
    test_context, test_joint = _ngram_codes(test_ids, order, V)
    joint = _count_in(test_joint, train_joint).double()
    context = _count_in(test_context, train_context).double()
    p = (joint + k) / (context + k * V)
    loss = -p.log().mean().item()
    return nats_per_char(loss, len(test_joint), n_chars)


def _ngram_codes(ids, order, V):
    """Each context of `order` tokens, and each (context, next token), as one int64: base-V digits."""
    n = len(ids) - order
    context = torch.zeros(n, dtype=torch.long, device=ids.device)
    for j in range(order):
        context = context * V + ids[j : j + n]
    return context, context * V + ids[order:]


def _count_in(queries, sample):
    """How often each of queries (m,) occurs in sample (n,): (m,) int64."""
    values, counts = torch.unique(sample, return_counts=True)
    i = torch.searchsorted(values, queries).clamp_max(len(values) - 1)
    return torch.where(values[i] == queries, counts[i], 0)


# ---------------------------------------------------------------- tokens


def learn_merges(text, vocab_size):
    """The merges of bpe.train_bpe(text, vocab_size), learned in seconds rather than minutes.

    The same rule (the most frequent pair inside words, ties to the smallest pair), but each
    distinct word is stored once with its number of occurrences, and after a merge only the
    words that held the pair are recounted. bpe.train_bpe recounts every word at every merge:
    on Tiny Shakespeare's training part it takes 70 s for 128 merges (over two minutes for
    vocab_size 512), this 1 s (2 s for vocab_size 512).
    returns merges: list of pairs (a, b); merges[k] creates the token 256 + k
    """
    occurrences = Counter(bpe.split_words(text))
    words = [list(word.encode("utf-8")) for word in occurrences]
    freq = list(occurrences.values())
    pairs = Counter()
    for ids, n in zip(words, freq):
        for pair in zip(ids, ids[1:]):
            pairs[pair] += n
    merges = []
    while bpe.N_BYTES + len(merges) < vocab_size and pairs:
        pair = min(pairs, key=lambda p: (-pairs[p], p))
        new_id = bpe.N_BYTES + len(merges)
        for w, ids in enumerate(words):
            if pair[0] not in ids or pair[1] not in ids:
                continue
            merged = bpe.merge_pair(ids, pair, new_id)
            for p in zip(ids, ids[1:]):
                pairs[p] -= freq[w]
            for p in zip(merged, merged[1:]):
                pairs[p] += freq[w]
            words[w] = merged
        pairs = +pairs  # drop the pairs whose count fell to 0
        merges.append(pair)
    return merges


def cache_dir():
    """Where trained merges are kept: $SEQCOURSE_CACHE, else ~/.cache/seqcourse."""
    return Path(os.environ.get("SEQCOURSE_CACHE") or Path.home() / ".cache" / "seqcourse")


def cached_merges(train_text, vocab_size, folder=None):
    """learn_merges(train_text, vocab_size), kept in a file named by a hash of the text and vocab_size,
    so that only the first run on a text pays for the training."""
    key = hashlib.sha256(train_text.encode("utf-8")).hexdigest()[:16]
    path = Path(folder or cache_dir()) / f"bpe-{key}-{vocab_size}.json"
    if path.is_file():
        return [tuple(pair) for pair in json.loads(path.read_text())]
    merges = learn_merges(train_text, vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # processes that train at once never read half a file
    partial.write_text(json.dumps(merges))
    os.replace(partial, path)
    return merges


@dataclass
class Tokenizer:
    """Text <-> token ids: notebook 09's BPE (kind "bpe", its merges), or one id per character
    (kind "char", the sorted characters of the training text: id i is chars[i])."""

    kind: str
    merges: list = None
    chars: str = None

    @property
    def V(self):
        return bpe.N_BYTES + len(self.merges) if self.kind == "bpe" else len(self.chars)

    def encode(self, text):
        """list of ids; a character the character-level vocabulary lacks raises ValueError."""
        if self.kind == "bpe":
            return bpe.encode(text, self.merges)
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - set(index))
        if unknown:
            raise ValueError(f"characters outside the vocabulary: {''.join(unknown)!r}; the vocabulary is {self.chars!r}")
        return [index[c] for c in text]

    def decode(self, ids):
        return bpe.decode(ids, self.merges) if self.kind == "bpe" else "".join(self.chars[i] for i in ids)


def tokenize(train_text, held_out_text, vocab_size=512, kind="bpe", folder=None):
    """Train a tokenizer on train_text alone, and encode both parts.

    kind "bpe": vocab_size - 256 merges, cached (cached_merges); kind "char": vocab_size is not used.
    returns tokenizer, train_ids (n_train,), held_out_ids (n_held_out,): LongTensors
    """
    if kind == "bpe":
        tokenizer = Tokenizer("bpe", merges=cached_merges(train_text, vocab_size, folder))
    elif kind == "char":
        tokenizer = Tokenizer("char", chars="".join(sorted(set(train_text))))
    else:
        raise ValueError(f"kind must be 'bpe' or 'char', not {kind!r}")
    train_ids = torch.tensor(tokenizer.encode(train_text), dtype=torch.long)
    held_out_ids = torch.tensor(tokenizer.encode(held_out_text), dtype=torch.long)
    return tokenizer, train_ids, held_out_ids
