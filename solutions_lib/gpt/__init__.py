"""A GPT of your own (notebook 10): a decoder-only language model on Shakespeare.

This module: the model, sampling and the KV cache; gpt.data: tokens, batches and held-out
nats per character, and the Markov baselines; gpt.train: the command (its loop: course_lib.gpt_training).

    python -m solutions_lib.gpt train                  # the recipe for the device found (CPU: 72 s, GPU: 45 s)
    python -m solutions_lib.gpt train --tokenizer char --max-seconds 20
    python -m solutions_lib.gpt train --resume checkpoints/gpt.pt --max-seconds 30
    python -m solutions_lib.gpt sample --prompt "ROMEO:" --temperature 0.8 --top-k 40
    python -m solutions_lib.gpt sample --prompt "ROMEO:" --beam 4 --tokens 60
    torchrun --standalone --nproc_per_node=2 -m solutions_lib.gpt train --max-steps 50

The model is notebook 07's decoder without cross-attention: token embeddings plus
learned position embeddings, N pre-norm blocks, a final LayerNorm, and an output
layer that shares the token embedding's matrix. It reads token ids (B, T) and
gives, at every position t, the logits of the token at t + 1: next-token
prediction, as notebook 02's Markov chain, but with a learned context of up to
block_size tokens.

Held-out loss is measured in nats per character (token cross-entropy x tokens /
characters), so that models with different tokenizers, and the counting models,
compare fairly; every held-out token is scored once, with a long context
(course_lib.gpt_training.held_out_loss). The tokens follow notebook 09's BPE rule,
learned on the training part of the text only (course_lib.gpt's learn_merges and
encode, which give solutions_lib.bpe's merges and ids, faster).

The command trains with a budget of seconds counted from its start: the
learning rate decays over whichever comes first, max_steps or max_seconds. The
forward pass runs under bfloat16 autocast where the device multiplies bfloat16 in
hardware (a GPU of compute capability 8.0 or later, a CPU with AVX512-BF16 or AMX),
under float16 with a gradient scaler on an older GPU, in float32 elsewhere
(--compile adds torch.compile); under torchrun every process trains on its share
of each batch (gloo on CPUs, NCCL on GPUs), and process 0 alone evaluates, prints
and saves.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.gpt import check_sampling  # noqa: F401  given code of the notebook, shared with the commands
from solutions_lib.attention import causal_mask
from solutions_lib.multihead import MultiHeadAttention
from solutions_lib.transformer import FeedForward, LayerNorm


# ---------------------------------------------------------------- the model


class Block(nn.Module):
    """One pre-norm decoder block: causal self-attention, then the feed-forward network.

        x = x + dropout(attend(ln1(x)))    each position attends to itself and the positions before it
        x = x + dropout(ffn(ln2(x)))

    Each norm sits inside its branch, so the residual stream x runs from the embedding to the last
    block without passing through any norm (07's post-norm normalises it after every sublayer).
    Submodules: ln1, ln2 = LayerNorm(d_model); attn = MultiHeadAttention(d_model, h, dropout);
    ffn = FeedForward(d_model, d_ff, dropout); dropout = nn.Dropout(dropout), on each branch's output.
    x: (B, T, d_model) -> (B, T, d_model)
    cache, i: a KVCache and this block's index in it; x then holds only the positions after the cached ones.
    """

    def __init__(self, d_model, h, d_ff, dropout=0.0):
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, h, dropout)
        self.ln2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cache=None, i=0):
        x = x + self.dropout(self.attend(self.ln1(x), cache, i))
        return x + self.dropout(self.ffn(self.ln2(x)))

    def attend(self, x, cache=None, i=0):
        """Causal self-attention: x (B, T, d_model) -> (B, T, d_model); position t attends to positions 0..t.

        With a cache, x holds the T newest positions: their keys and values join layer i's cached
        ones, and new position t attends to every cached position and to the new ones up to itself,
        which are the last T rows of the causal mask over all T_k positions.
        """
        if cache is None:
            return self.attn(x, x, x, causal_mask(x.size(1), device=x.device))[0]
        a, (B, T, d_model) = self.attn, x.shape
        q, k, v = (W(x).view(B, T, a.h, -1).transpose(1, 2) for W in (a.W_q, a.W_k, a.W_v))  # (B, h, T, d_k) each
        k, v = cache.extend(i, k, v)  # (B, h, T_k, d_k), T_k = cached + T
        T_k = k.size(2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T_k, device=x.device)[T_k - T :])
        return a.W_o(out.transpose(1, 2).reshape(B, T, d_model))


class GPT(nn.Module):
    """A decoder-only Transformer language model: notebook 07's decoder without cross-attention.

    Submodules: tok_embed = nn.Embedding(V, d_model); pos_embed = nn.Embedding(block_size, d_model),
    the learned positions; dropout = nn.Dropout(dropout), on the sum of the two embeddings;
    blocks = nn.ModuleList of N Block(d_model, h, d_ff, dropout); ln_f = LayerNorm(d_model);
    head = nn.Linear(d_model, V, bias=False), whose weight IS tok_embed.weight (weight tying).
    idx: (B, T) token ids, T <= block_size; targets: (B, T), targets[:, t] = the token after idx[:, t]
    returns (logits (B, T, V), loss): the logits of the next token at every position, and
    loss = lm_loss(logits, targets), or None without targets.
    With a KVCache, idx holds only the tokens after the cached ones: their positions start at cache.length.
    """

    def __init__(self, V, *, d_model, h, d_ff, N, block_size, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.tok_embed = nn.Embedding(V, d_model)
        self.pos_embed = nn.Embedding(block_size, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, h, d_ff, dropout) for _ in range(N))
        self.ln_f = LayerNorm(d_model)
        self.head = nn.Linear(d_model, V, bias=False)
        self.head.weight = self.tok_embed.weight
        init_weights(self, N)

    def embed(self, idx, start=0):
        """Token plus position embeddings: (B, T) ids of the positions start .. start + T - 1 -> (B, T, d_model)."""
        T = idx.size(1)
        if start + T > self.block_size:
            raise ValueError(f"{start + T} positions, but the model has block_size = {self.block_size}: crop the input")
        positions = torch.arange(start, start + T, device=idx.device)
        return self.dropout(self.tok_embed(idx) + self.pos_embed(positions))

    def forward(self, idx, targets=None, cache=None):
        x = self.embed(idx, 0 if cache is None else cache.length)
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i)
        logits = self.head(self.ln_f(x))
        return logits, None if targets is None else lm_loss(logits, targets)


def lm_loss(logits, targets):
    """Mean cross-entropy of logits (B, T, V) against targets (B, T): a scalar, in nats per token."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def init_weights(model, N, residual=("attn.W_o", "ffn.W_2")):
    """nanoGPT's initialisation (after the GPT-2 paper), in place: every weight matrix and embedding ~ N(0, 0.02^2), biases 0,
    LayerNorm as built (gamma 1, beta 0). The projections that write into the residual stream
    (parameters of a module whose name ends with one of `residual`) get std 0.02 / sqrt(2N): the
    stream adds 2N of them, so its variance stays that of one. Returns model."""
    for name, p in model.named_parameters():
        module = name.rpartition(".")[0]
        if p.dim() >= 2:
            nn.init.normal_(p, std=0.02 / math.sqrt(2 * N) if module.endswith(residual) else 0.02)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
    return model


# ---------------------------------------------------------------- sampling


def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    """Draw the next token of each row from softmax(logits / temperature), keeping only the top_k
    largest logits and the top_p nucleus when they are given.

    logits: (B, V) -> ids: (B,) int64
    temperature: 0 means argmax (no drawing); below 1 sharpens the distribution, above 1 flattens it.
    top_k: keep the k largest logits (all of them when k >= V); the others get probability 0.
    top_p: keep the smallest set of the most probable tokens whose probability reaches top_p,
    computed after temperature and top_k; the others get probability 0.
    The draw: torch.multinomial(probabilities, 1, generator=generator), one token per row.
    """
    check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (B, 1): the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        probs, order = logits.softmax(dim=-1).sort(dim=-1, descending=True)
        enough = probs.cumsum(dim=-1) - probs >= top_p  # the more probable tokens reach top_p without this one
        drop = torch.zeros_like(enough).scatter(-1, order, enough)  # back from sorted order to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)


class KVCache:
    """The keys and values every layer has computed so far, so that a step feeds the new tokens only.

    keys[i], values[i]: (B, h, T_cached, d_k), layer i's, or None before the first step.
    Learned positions are absolute: once the sequence outgrows block_size, dropping its first
    token shifts every position and so every cached key, and generate stops using the cache.
    """

    def __init__(self, N):
        self.keys, self.values = [None] * N, [None] * N

    @property
    def length(self):
        """T_cached: how many positions are cached, which is also the position of the next token."""
        return 0 if self.keys[0] is None else self.keys[0].size(2)

    def extend(self, i, k, v):
        """Append layer i's new keys and values, (B, h, T_new, d_k) each, after its cached ones;
        returns all of the layer's keys and values: (B, h, T_cached + T_new, d_k) each."""
        if self.keys[i] is not None:
            k, v = torch.cat([self.keys[i], k], dim=2), torch.cat([self.values[i], v], dim=2)
        self.keys[i], self.values[i] = k, v
        return k, v


def generate(model, idx, max_new_tokens, use_cache=True, **sampling):
    """Extend each row of idx by max_new_tokens tokens, one at a time, each drawn by
    sample_next(logits of the last position, **sampling).

    idx: (B, T) prompt ids, T >= 1 -> (B, T + max_new_tokens)
    use_cache: the first step runs the prompt through model(idx, cache=KVCache(len(model.blocks)))
    and each later step feeds the newest token alone, model(idx[:, cache.length :], cache=cache).
    Beyond block_size tokens the model reads the last block_size only, recomputed at every step
    without a cache (the positions of all of them have shifted); use_cache=False recomputes the
    window at every step. With temperature 0 both give the same tokens.
    Runs in eval mode without gradients, and leaves the model in the mode it found.
    """
    was_training = model.training
    model.eval()
    cache = KVCache(len(model.blocks)) if use_cache else None
    with torch.no_grad():
        for _ in range(max_new_tokens):
            if cache is not None and idx.size(1) <= model.block_size:
                logits, _ = model(idx[:, cache.length :], cache=cache)
            else:
                logits, _ = model(idx[:, -model.block_size :])
            next_id = sample_next(logits[:, -1], **sampling)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
    model.train(was_training)
    return idx


def beam_generate(model, idx, max_new_tokens, beam_size):
    """The likeliest continuation of idx that a beam of beam_size hypotheses finds: beam search without an end token.

    idx: (1, T) prompt ids, T >= 1 -> (ids, score): ids (1, T + max_new_tokens), the best hypothesis;
    score (float), its log-probability: the sum over its new tokens of log_softmax(logits) at that token.
    The live hypotheses ys (k, T + t) start as the prompt alone (k = 1). Each step runs the model once on
    all of them, adds each token's log-probability to its hypothesis's score, giving (k, V) candidates,
    and keeps the beam_size best of all k * V; each kept candidate extends a parent hypothesis by a token.
    The KV cache holds one row per hypothesis: after the choice its rows are reordered by parent, so that
    row r holds the keys and values of the hypothesis that row r of ys extends.
    Beyond block_size tokens, as generate: the last block_size tokens, recomputed without the cache.
    Runs in eval mode without gradients, and leaves the model in the mode it found.
    """
    was_training = model.training
    model.eval()
    cache = KVCache(len(model.blocks))
    ys, scores = idx, torch.zeros(1, device=idx.device)  # (k, T + t) live hypotheses, (k,) their log-probabilities
    with torch.no_grad():
        for _ in range(max_new_tokens):
            cached = ys.size(1) <= model.block_size
            logits, _ = model(ys[:, cache.length :], cache=cache) if cached else model(ys[:, -model.block_size :])
            candidates = scores[:, None] + F.log_softmax(logits[:, -1], dim=-1)  # (k, V)
            V = candidates.size(1)
            scores, index = candidates.flatten().topk(min(beam_size, candidates.numel()))  # the best of all k * V
            parent, token = index // V, index % V
            ys = torch.cat([ys[parent], token[:, None]], dim=1)
            if cached:  # row r of the cache follows hypothesis r
                cache.keys = [k[parent] for k in cache.keys]
                cache.values = [v[parent] for v in cache.values]
    model.train(was_training)
    return ys[:1], scores[0].item()
