"""Attention in a recurrent encoder-decoder (notebook 03).

At decoder step t, with decoder state s (B, d_s) and encoder states H (B, T, d_h),
whose rows are h_1 .. h_T:
    scores   e_i   = score(s, h_i)                 (B, T)
    weights  alpha = softmax(e) over the T source positions
    context  a     = sum_i alpha_i h_i             (B, d_h)
and the output is read from [a; s]. Masks are boolean, True where attention is allowed.

The decoder step follows the order of Luong, Pham and Manning (2015): update the
state with the previous output, attend with the new state, predict from [a; s].
Bahdanau, Cho and Bengio (2015) score with the previous state s_{t-1} and feed the
context into the recurrent cell instead.
"""
import math

import torch
from torch import nn

# ---------------------------------------------------------------- score functions
# Every score takes s: (B, d_s) and H: (B, T, d_h) and returns scores: (B, T).


def dot_score(s, H):
    """Dot-product score e_i = s . h_i (needs d_s = d_h).

    s: (B, d_h), H: (B, T, d_h) -> scores: (B, T)
    """
    return (H @ s.unsqueeze(-1)).squeeze(-1)


def scaled_dot_score(s, H):
    """Scaled dot-product score e_i = s . h_i / sqrt(d_h).

    s: (B, d_h), H: (B, T, d_h) -> scores: (B, T)
    """
    return dot_score(s, H) / math.sqrt(H.size(-1))


class GeneralScore(nn.Module):
    """Multiplicative ("general") score e_i = s^T W h_i, with W: (d_s, d_h).

    self.W = nn.Linear(d_h, d_s, bias=False), so self.W(h_i) = W h_i
    s: (B, d_s), H: (B, T, d_h) -> scores: (B, T)
    """

    def __init__(self, d_s, d_h):
        super().__init__()
        self.W = nn.Linear(d_h, d_s, bias=False)

    def forward(self, s, H):
        return dot_score(s, self.W(H))


class AdditiveScore(nn.Module):
    """Additive (Bahdanau) score e_i = v^T tanh(W1 h_i + W2 s).

    self.W1 = nn.Linear(d_h, d_a, bias=False), self.W2 = nn.Linear(d_s, d_a, bias=False),
    self.v = nn.Linear(d_a, 1, bias=False)
    s: (B, d_s), H: (B, T, d_h) -> scores: (B, T)
    """

    def __init__(self, d_s, d_h, d_a):
        super().__init__()
        self.W1 = nn.Linear(d_h, d_a, bias=False)
        self.W2 = nn.Linear(d_s, d_a, bias=False)
        self.v = nn.Linear(d_a, 1, bias=False)

    def forward(self, s, H):
        hidden = torch.tanh(self.W1(H) + self.W2(s).unsqueeze(1))  # (B, T, d_a)
        return self.v(hidden).squeeze(-1)


def cosine_score(s, H, eps=1e-8):
    """Content-based score e_i = cos(s, h_i) = s . h_i / (|s| |h_i|).

    s: (B, d_h), H: (B, T, d_h) -> scores: (B, T), in [-1, 1]
    Each norm is clamped to at least eps, so a zero vector scores 0, not NaN.
    """
    s = s / s.norm(dim=-1, keepdim=True).clamp_min(eps)
    H = H / H.norm(dim=-1, keepdim=True).clamp_min(eps)
    return dot_score(s, H)


class LocationScore(nn.Module):
    """Location-based score e = W s, one score per source position, from s alone.

    self.W = nn.Linear(d_s, max_len, bias=False)
    s: (B, d_s), H: (B, T, d_h) with T <= max_len -> scores: (B, T), the first T of W s
    H is used for its length only.
    """

    def __init__(self, d_s, max_len):
        super().__init__()
        self.W = nn.Linear(d_s, max_len, bias=False)

    def forward(self, s, H):
        return self.W(s)[:, : H.size(1)]


# ---------------------------------------------------------------- weights and context


def attention_weights(scores, mask=None):
    """Softmax of the scores over the source positions.

    scores: (B, T); mask: bool (B, T), True at the positions that may be attended to
    returns alpha: (B, T); each row sums to 1 and is 0 where the mask is False.
    A row whose positions are all masked gets zero weights (softmax of a row of
    -inf alone would give NaN).
    """
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


def context_vector(alpha, H):
    """The weighted average of the encoder states, a = sum_i alpha_i h_i.

    alpha: (B, T), H: (B, T, d_h) -> a: (B, d_h)
    """
    return (alpha.unsqueeze(-1) * H).sum(dim=1)


# ---------------------------------------------------------------- the decoder


class AttentionDecoderStep(nn.Module):
    """One step of a GRU decoder with additive attention over the encoder states.

    Luong et al.'s order: update the state, attend with the new state, predict from [a; s].
    self.embedding = nn.Embedding(vocab_size, d_emb), self.cell = nn.GRUCell(d_emb, d_h),
    self.attention = AdditiveScore(d_h, d_h, d_h), self.out = nn.Linear(2 * d_h, vocab_size)

    y_prev: (B,) previous output ids; s_prev: (B, d_h) previous state
    H: (B, T, d_h) encoder states; mask: bool (B, T), True at real source tokens
    returns logits: (B, vocab_size), s: (B, d_h) the new state, alpha: (B, T)
    """

    def __init__(self, vocab_size, d_emb, d_h):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_emb)
        self.cell = nn.GRUCell(d_emb, d_h)
        self.attention = AdditiveScore(d_h, d_h, d_h)
        self.out = nn.Linear(2 * d_h, vocab_size)

    def forward(self, y_prev, s_prev, H, mask=None):
        s = self.cell(self.embedding(y_prev), s_prev)
        alpha = attention_weights(self.attention(s, H), mask)
        a = context_vector(alpha, H)
        return self.out(torch.cat([a, s], dim=-1)), s, alpha


class Seq2SeqAttention(nn.Module):
    """A GRU encoder and an attention decoder, trained with teacher forcing. Token 0 is padding.

    self.embedding = nn.Embedding(vocab_size, d_emb) (the source's),
    self.encoder = nn.GRU(d_emb, d_h, batch_first=True),
    self.decoder = AttentionDecoderStep(vocab_size, d_emb, d_h)
    """

    def __init__(self, vocab_size, d_emb, d_h):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_emb)
        self.encoder = nn.GRU(d_emb, d_h, batch_first=True)
        self.decoder = AttentionDecoderStep(vocab_size, d_emb, d_h)

    def encode(self, src):
        """src: (B, T_src), padded with 0 at the end
        returns H: (B, T_src, d_h) the encoder states, s0: (B, d_h) the state at each last real token,
        mask: bool (B, T_src), True at the real tokens
        """
        mask = src != 0
        H, _ = self.encoder(self.embedding(src))
        last = mask.sum(dim=1) - 1  # the last real token of each source
        s0 = H[torch.arange(src.size(0), device=src.device), last]
        return H, s0, mask

    def forward(self, src, tgt_in):
        """src: (B, T_src); tgt_in: (B, T_out), <bos> then the target
        returns logits: (B, T_out, vocab_size) and alpha: (B, T_out, T_src)
        """
        H, s, mask = self.encode(src)
        logits, alphas = [], []
        for t in range(tgt_in.size(1)):
            step_logits, s, alpha = self.decoder(tgt_in[:, t], s, H, mask)
            logits.append(step_logits)
            alphas.append(alpha)
        return torch.stack(logits, dim=1), torch.stack(alphas, dim=1)


@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id=1, eos_id=2, pad_id=0):
    """Decode a batch with a trained Seq2SeqAttention, always taking the most likely next token.

    src: (B, T_src) ids, padded with 0. The source is encoded once; each step feeds the
    last token to the decoder and takes the argmax. A sequence that has produced <eos>
    gets pad_id from then on; decoding stops when every sequence has ended, or after
    max_len new tokens (the convention of notebook 08's greedy_decode).
    returns ids: (B, 1 + L) starting with <bos>, L <= max_len,
    and alpha: (B, L, T_src) the attention weights of each generated token
    """
    H, s, mask = model.encode(src)
    y = torch.full((src.size(0),), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros_like(y, dtype=torch.bool)
    ids, alphas = [y], [H.new_zeros(src.size(0), 0, src.size(1))]  # the empty one: max_len = 0
    for _ in range(max_len):
        logits, s, alpha = model.decoder(y, s, H, mask)
        y = logits.argmax(dim=-1).masked_fill(done, pad_id)
        ids.append(y)
        alphas.append(alpha.unsqueeze(1))
        done = done | (y == eos_id)
        if done.all():
            break
    return torch.stack(ids, dim=1), torch.cat(alphas, dim=1)
