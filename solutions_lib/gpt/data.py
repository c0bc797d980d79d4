"""The data of notebook 10: random windows of the token stream, and the held-out loss in nats per
character, for the GPT and for the Markov baselines of notebook 02. The tokens themselves (notebook
09's merges, learned on the training part only) are course_lib.gpt_training's: Tokenizer, tokenize."""
import math
from collections import Counter

import torch

from course_lib.gpt import learn_merges  # noqa: F401  notebook 09's merges, learned in seconds
from course_lib.gpt_training import cached_merges, held_out_loss, tokenize  # noqa: F401  (tests import the first and last from here)


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


def evaluate(model, data, block_size, n_chars, stride=None, batch_size=64):
    """Held-out nats per character: the model's loss over the whole token stream `data`
    (course_lib.gpt_training.held_out_loss: every token but the first predicted once, with a long context:
    windows of block_size every `stride` tokens, by default half a block), over the n_chars characters
    the stream encodes."""
    return nats_per_char(*held_out_loss(model, data, block_size, stride, batch_size), n_chars)


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
