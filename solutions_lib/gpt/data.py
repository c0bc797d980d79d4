"""The data of notebook 10: Tiny Shakespeare as BPE tokens (notebook 09's merges, learned on the
training part only), random windows, and the held-out loss in nats per character, for the GPT and
for the Markov baselines of notebook 02."""
import hashlib
import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from course_lib.gpt import learn_merges  # notebook 09's merges, learned in seconds
from solutions_lib import bpe
from solutions_lib.gpt import lm_loss


# ---------------------------------------------------------------- data


def get_batch(data, block_size, B, generator=None):
    """B random windows of block_size tokens, and the token that follows each of their positions.

    data: (n,) int64 token ids, n > block_size, on any device; generator: a CPU torch.Generator
    returns x, y: (B, block_size) each, on data's device. Window b starts at s_b, drawn for all b at
    once by torch.randint(n - block_size, (B,), generator=generator): x[b] = data[s_b : s_b + block_size]
    and y[b] = data[s_b + 1 : s_b + block_size + 1], so y[:, t] is the token after x[:, t], and every
    window lies inside data, its last target included.
    """
    if len(data) <= block_size:
        raise ValueError(f"{len(data)} tokens are too few for windows of block_size + 1 = {block_size + 1}")
    starts = torch.randint(len(data) - block_size, (B,), generator=generator).to(data.device)
    index = starts[:, None] + torch.arange(block_size, device=data.device)  # (B, block_size)
    return data[index], data[index + 1]


def nats_per_char(loss_per_token, n_tokens, n_chars):
    """A mean cross-entropy per token, in nats, as nats per character: the total, loss x tokens, over the characters.

    Perplexity per character is exp of it; bits per character, it divided by ln 2.
    returns: float (a tensor when loss_per_token is one)
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
    P(c | context) = (count(context, c) + k) / (count(context) + k V), counted on train_ids:
    count(context, c) counts the windows of order + 1 tokens equal to (context, c), and count(context)
    the windows that start with context (a context never seen gets the uniform 1/V).
    Every token of test_ids after the first `order` is predicted from the `order` tokens before it.
    train_ids, test_ids: (n,) int64 tensors; V: the vocabulary size; n_chars: the characters test_ids encodes
    returns: float, nats_per_char(mean of -ln P over the predicted tokens, how many they are, n_chars)
    """
    if min(len(train_ids), len(test_ids)) <= order:
        raise ValueError(f"an order-{order} model needs more than {order} tokens of training and of test data")

    def windows(ids):  # every window of order + 1 consecutive tokens, as a tuple
        ids = ids.tolist()
        return list(zip(*(ids[j : len(ids) - order + j] for j in range(order + 1))))

    joint = Counter(windows(train_ids))
    context = Counter()
    for w, n in joint.items():
        context[w[:-1]] += n
    test = windows(test_ids)
    loss = -sum(math.log((joint[w] + k) / (context[w[:-1]] + k * V)) for w in test) / len(test)
    return nats_per_char(loss, len(test), n_chars)


# ---------------------------------------------------------------- tokens


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
