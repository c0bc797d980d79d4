"""Notebook 10's building blocks from the notebooks before it, and the objects its checks hand to your code.

- LayerNorm and FeedForward of notebook 07, on F.layer_norm and nn.Linear;
- the byte-pair encoding of notebook 09 (train_bpe, encode, decode), and learn_merges, which
  learns train_bpe's merges in seconds instead of minutes;
- check_sampling, the notebook's given check of sample_next's settings;
- TinyGPT, a small GPT with random weights written on PyTorch's functions, PrefilledCache,
  a KV cache that already holds some positions, and CacheSteps, which feeds a cache step by step:
  the checks of Block, GPT, KVCache and generate use them.
"""
import re
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------- notebook 07's blocks


class LayerNorm(nn.Module):
    """Notebook 07's LayerNorm by F.layer_norm: gamma * (x - mean) / sqrt(var + eps) + beta over the last axis.

    Parameters: gamma (d_model,) ones and beta (d_model,) zeros. x: (..., d_model) -> (..., d_model)
    """

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma, self.beta, self.eps = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model)), eps

    def forward(self, x):  # in x's dtype, so that float64 inputs keep their precision
        return F.layer_norm(x, x.shape[-1:], self.gamma.to(x.dtype), self.beta.to(x.dtype), self.eps)


class FeedForward(nn.Module):
    """Notebook 07's position-wise feed-forward network, W_2(dropout(ReLU(W_1 x))).

    Submodules: W_1 = nn.Linear(d_model, d_ff), W_2 = nn.Linear(d_ff, d_model), dropout.
    x: (B, T, d_model) -> (B, T, d_model)
    """

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.W_1, self.W_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        hidden = F.relu(self.W_1(x))
        return self.W_2(self.dropout(hidden))


# ---------------------------------------------------------------- notebook 10's given code


def check_sampling(temperature=1.0, top_k=None, top_p=None):
    """Raise ValueError for settings sample_next cannot use."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, not {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, not {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], not {top_p}")


# ---------------------------------------------------------------- notebook 09's tokenizer

N_BYTES = 256  # the base vocabulary: one token per byte value
_WORD = re.compile(r"\s*\S+|\s+")  # a word keeps the whitespace in front of it


def split_words(text):
    """Cut text into words that keep the whitespace before them: "".join(split_words(text)) == text."""
    return _WORD.findall(text)


def text_to_words(text):
    """The words of text as lists of byte ids (ints in 0..255)."""
    return [list(word.encode("utf-8")) for word in split_words(text)]


def _merged(ids, pair, new_id):
    """ids with each occurrence of pair, scanned from the left, replaced by new_id (overlaps skipped)."""
    out, skip = [], False
    for j, x in enumerate(ids):
        if skip:
            skip = False
        elif j + 1 < len(ids) and (x, ids[j + 1]) == pair:
            out.append(new_id)
            skip = True
        else:
            out.append(x)
    return out


def train_bpe(text, vocab_size):
    """Notebook 09's train_bpe, as a plain loop: recount every pair inside the words, merge the most
    frequent (ties: the smallest pair), until vocab_size - 256 merges. returns merges: list of pairs."""
    words, merges = text_to_words(text), []
    while N_BYTES + len(merges) < vocab_size:
        counts = Counter(p for ids in words for p in zip(ids, ids[1:]))
        if not counts:
            break
        merges.append(min(counts, key=lambda p: (-counts[p], p)))
        words = [_merged(ids, merges[-1], N_BYTES + len(merges) - 1) for ids in words]
    return merges


def learn_merges(text, vocab_size):
    """The merges of train_bpe(text, vocab_size), learned in seconds rather than minutes.

    The same rule (the most frequent pair inside words, ties to the smallest pair), but each
    distinct word is stored once with its number of occurrences, and after a merge only the
    words that held the pair are counted again. train_bpe recounts every word at every merge:
    on Tiny Shakespeare's training part notebook 09's takes over a minute for 128 merges,
    this about a second (2 s for 256 merges).
    returns merges: list of pairs (a, b); merges[k] creates the token 256 + k
    """
    occurrences = Counter(split_words(text))
    words = [list(word.encode("utf-8")) for word in occurrences]
    freq = list(occurrences.values())
    pairs = Counter()
    for ids, n in zip(words, freq):
        for pair in zip(ids, ids[1:]):
            pairs[pair] += n
    merges = []
    while N_BYTES + len(merges) < vocab_size and pairs:
        pair = min(pairs, key=lambda p: (-pairs[p], p))
        new_id = N_BYTES + len(merges)
        for w, ids in enumerate(words):
            if pair[0] not in ids or pair[1] not in ids:
                continue
            merged = _merged(ids, pair, new_id)
            for p in zip(ids, ids[1:]):
                pairs[p] -= freq[w]
            for p in zip(merged, merged[1:]):
                pairs[p] += freq[w]
            words[w] = merged
        pairs = +pairs  # drop the pairs whose count fell to 0
        merges.append(pair)
    return merges


def _encode_word(ids, merges, rank):
    """One word's byte ids with the merges applied, the earliest learned pair first."""
    while len(ids) > 1:
        k = min(rank.get(p, len(merges)) for p in zip(ids, ids[1:]))
        if k == len(merges):
            return ids
        ids = _merged(ids, merges[k], N_BYTES + k)
    return ids


def encode(text, merges):
    """Notebook 09's encode: the ids of text, each word's UTF-8 bytes with the merges applied in the
    order they were learned. A word met before is looked up instead of encoded again."""
    merges = [tuple(pair) for pair in merges]
    rank, known, out = {pair: k for k, pair in enumerate(merges)}, {}, []
    for word in split_words(text):
        if word not in known:
            known[word] = _encode_word(list(word.encode("utf-8")), merges, rank)
        out.extend(known[word])
    return out


def decode(ids, merges):
    """Notebook 09's decode: the bytes of every token joined, then decoded once as UTF-8 (errors="replace")."""
    table = [bytes([b]) for b in range(N_BYTES)]
    for a, b in merges:
        table.append(table[a] + table[b])
    return b"".join(table[i] for i in ids).decode("utf-8", errors="replace")


# ---------------------------------------------------------------- what the checks hand to your code


class PrefilledCache:
    """A KV cache that already holds T_cached positions of random keys and values in each of N layers.

    The same interface as the KVCache of notebook 10: keys[i], values[i] of shape (B, h, T_cached, d_k),
    length (the number of cached positions) and extend(i, k, v), which appends along the time axis
    and returns all of layer i's keys and values.
    """

    def __init__(self, N, B, h, T_cached, d_k, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.keys = [torch.randn(B, h, T_cached, d_k, generator=g) for _ in range(N)]
        self.values = [torch.randn(B, h, T_cached, d_k, generator=g) for _ in range(N)]

    @property
    def length(self):
        return self.keys[0].size(2)

    def extend(self, i, k, v):
        self.keys[i] = torch.cat([self.keys[i], k], dim=2)
        self.values[i] = torch.cat([self.values[i], v], dim=2)
        return self.keys[i], self.values[i]


class CacheSteps:
    """What the check of KVCache does with a cache: it feeds it random keys and values, step by step.

    Called with a cache, each step extends every layer i = 0..N-1 by new keys and values of shape
    (B, h, T_new, d_k), T_new from `new` (the first step a prompt, the later ones a token or a few).
    returns (cache.length before each step and after the last, the keys each extend returned,
    the values each extend returned)
    """

    def __init__(self, N, B, h, d_k, new, seed=0):
        self.N, self.B, self.h, self.d_k, self.new, self.seed = N, B, h, d_k, list(new), seed

    def __call__(self, cache):
        g = torch.Generator().manual_seed(self.seed)
        lengths, keys, values = [], [], []
        for T_new in self.new:
            lengths.append(cache.length)
            for i in range(self.N):
                k_all, v_all = cache.extend(i, *torch.randn(2, self.B, self.h, T_new, self.d_k, generator=g))
                keys.append(k_all)
                values.append(v_all)
        lengths.append(cache.length)
        return lengths, keys, values

    def __repr__(self):
        return f"steps of {', '.join(map(str, self.new))} new positions in each layer"


class TinyGPT(nn.Module):
    """A small GPT with random weights, written on PyTorch's functions: the model the checks of generate use.

    It has what generate needs of a model: blocks (N of them), block_size, and
    forward(idx, targets=None, cache=None) -> (logits (B, T, V), None), where a cache is anything
    with length and extend(i, k, v), as the KVCache of notebook 10. More than block_size
    positions raise ValueError. dropout: the rate applied, in training mode only, to the embeddings
    and to each block's two branches (0: none). counting: the model counts the calls it ran with
    gradients on and the positions it computed, which the checks compare (what_it_saw): generation runs
    without gradients, and a KV cache computes each position once.
    """

    def __init__(self, V, d_model=16, h=2, N=2, block_size=12, seed=0, dropout=0.0, counting=False):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.h, self.block_size, self.dropout = h, block_size, dropout
        self.counts = {"calls with gradients on": 0, "positions computed": 0} if counting else None
        self.tokens = nn.Parameter(torch.randn(V, d_model, generator=g))
        self.positions = nn.Parameter(0.5 * torch.randn(block_size, d_model, generator=g))
        self.blocks = nn.ModuleList(_TinyBlock(d_model, g) for _ in range(N))
        self.unembed = nn.Parameter(torch.randn(V, d_model, generator=g))

    def what_it_saw(self):
        """{what: count} for the checks' comparison, when counting: the model's calls run with gradients on
        (torch.no_grad() makes them 0), and the positions it computed, summed over its calls."""
        if self.counts is None:
            return {}
        return {"model's calls with gradients on (torch.no_grad() makes them 0)": self.counts["calls with gradients on"],
                "positions the model computed over all its calls (a KV cache computes each once)": self.counts["positions computed"]}

    def forward(self, idx, targets=None, cache=None):
        start, T = (0 if cache is None else cache.length), idx.size(1)
        if self.counts is not None:
            self.counts["calls with gradients on"] += torch.is_grad_enabled()
            self.counts["positions computed"] += T
        if start + T > self.block_size:
            raise ValueError(f"{start + T} positions, but the model has block_size = {self.block_size}")
        p = self.dropout if self.training else 0.0  # dropout acts in training mode only
        x = F.dropout(self.tokens[idx] + self.positions[start : start + T], p)
        for i, block in enumerate(self.blocks):
            x = block(x, self.h, cache, i, p)
        return F.layer_norm(x, x.shape[-1:]) @ self.unembed.t(), None


class _TinyBlock(nn.Module):
    def __init__(self, d_model, g):
        super().__init__()
        scale = d_model**-0.5
        self.qkv = nn.Parameter(scale * torch.randn(3 * d_model, d_model, generator=g))
        self.out = nn.Parameter(scale * torch.randn(d_model, d_model, generator=g))
        self.up = nn.Parameter(scale * torch.randn(2 * d_model, d_model, generator=g))
        self.down = nn.Parameter(scale * torch.randn(d_model, 2 * d_model, generator=g))

    def forward(self, x, h, cache, i, p=0.0):
        B, T, d_model = x.shape
        heads = (F.layer_norm(x, (d_model,)) @ self.qkv.t()).view(B, T, 3, h, d_model // h).permute(2, 0, 3, 1, 4)
        q, k, v = heads  # (B, h, T, d_k) each
        if cache is not None:
            k, v = cache.extend(i, k, v)
        seen = torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).tril(k.size(2) - T)  # the past, and itself
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=seen)
        x = x + F.dropout(out.transpose(1, 2).reshape(B, T, d_model) @ self.out.t(), p)
        return x + F.dropout(F.gelu(F.layer_norm(x, (d_model,)) @ self.up.t()) @ self.down.t(), p)
