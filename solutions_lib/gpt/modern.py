"""A GPT as trained today (notebook 11): what language models changed after GPT-2, on notebook 10's GPT.

    RMSNorm            x / rms(x) * weight: LayerNorm without the mean and the shift (Zhang & Sennrich, 2019)
    apply_rotary       rotary position embeddings: each pair of a query's or key's features turned by an
                       angle proportional to its position (Su et al., 2021), notebook 04's shift as a rotation
    RotaryAttention    causal self-attention on rotated queries and keys, with QK-norm (Henry et al., 2020;
                       Dehghani et al., 2023): an RMSNorm on every head's queries and keys before the rotation
    ReLU2FeedForward   W_2 relu(W_1 x)^2, the squared ReLU (So et al., 2021)
    ModernGPT          notebook 10's GPT with these parts, no position embeddings, and the projections that
                       write into the residual stream initialised to zero
    newton_schulz      Muon's orthogonalisation of a matrix (Jordan et al., 2024)
    split_parameters   which parameters Muon trains (the blocks' matrices) and which AdamW trains

The KV cache, sampling and generation are notebook 10's (solutions_lib.gpt): a cache holds the keys
already rotated at their positions, so a new token's query, rotated at its own, meets them as it should.
"""
import torch
import torch.nn.functional as F
from torch import nn

from solutions_lib.attention import causal_mask
from solutions_lib.gpt import init_weights, lm_loss


class RMSNorm(nn.Module):
    """weight * x / sqrt(mean(x^2) + eps) over the last axis: LayerNorm without subtracting the mean and without beta.

    Parameter: weight (d,) ones. x: (..., d) -> (..., d)
    """

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def apply_rotary(x, positions, base=10000.0):
    """Rotate each pair of features (x[..., 2i], x[..., 2i+1]) by the angle positions[t] * theta_i,
    theta_i = base^(-2i / d_k), notebook 04's frequencies:

        (x_2i, x_2i+1) -> (x_2i cos a - x_2i+1 sin a,  x_2i sin a + x_2i+1 cos a),  a = positions[t] * theta_i

    A query rotated at position m and a key rotated at n then have a dot product that depends on m - n alone.
    x: (B, h, T, d_k), d_k even; positions: (T,) integers -> (B, h, T, d_k), in x's dtype
    """
    d_k = x.size(-1)
    dtype = torch.promote_types(x.dtype, torch.float32)  # angles in float32 at least
    theta = base ** (-torch.arange(0, d_k, 2, device=x.device, dtype=dtype) / d_k)  # (d_k/2,)
    angle = positions.to(dtype)[:, None] * theta  # (T, d_k/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, h, T, d_k/2) each: the first and second feature of every pair
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class RotaryAttention(nn.Module):
    """Causal multi-head self-attention whose positions are rotations of the queries and keys.

        q, k, v = x W_q, x W_k, x W_v, split into h heads of d_k = d_model / h
        q, k = apply_rotary(q_norm(q), positions), apply_rotary(k_norm(k), positions)
        out = W_o(merge(softmax(q k^T / sqrt(d_k) + causal mask) v))

    Submodules: W_q, W_k, W_v, W_o = nn.Linear(d_model, d_model, bias=False); q_norm, k_norm = RMSNorm(d_k),
    over each head's features, when qk_norm, else nn.Identity().
    x: (B, T, d_model), positions: (T,) the positions of x's tokens -> (B, T, d_model)
    cache, i: a KVCache (notebook 10's) and this layer's index in it: the new keys, rotated, join the cached ones,
    and new position t attends to every cached position and to the new ones up to itself.
    q: (B, h, T, d_k); k, v: (B, h, T_k, d_k), T_k = cached + T once the new keys and values have joined the cache.
    """

    def __init__(self, d_model, h, qk_norm=True):
        super().__init__()
        self.h = h
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.q_norm = RMSNorm(d_model // h) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(d_model // h) if qk_norm else nn.Identity()

    def forward(self, x, positions, cache=None, i=0):
        B, T, d_model = x.shape
        q, k, v = (W(x).view(B, T, self.h, -1).transpose(1, 2) for W in (self.W_q, self.W_k, self.W_v))  # (B, h, T, d_k)
        q, k = apply_rotary(self.q_norm(q), positions), apply_rotary(self.k_norm(k), positions)
        if cache is not None:
            k, v = cache.extend(i, k, v)  # (B, h, T_k, d_k), T_k = cached + T
        T_k = k.size(2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T_k, device=x.device)[T_k - T :])
        return self.W_o(out.transpose(1, 2).reshape(B, T, d_model))


class ReLU2FeedForward(nn.Module):
    """The position-wise feed-forward network with a squared ReLU: W_2(relu(W_1 x)^2).

    Submodules: W_1 = nn.Linear(d_model, d_ff, bias=False), W_2 = nn.Linear(d_ff, d_model, bias=False).
    x: (B, T, d_model) -> (B, T, d_model)
    """

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.W_1, self.W_2 = nn.Linear(d_model, d_ff, bias=False), nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.W_2(F.relu(self.W_1(x)).square())


class ModernBlock(nn.Module):
    """Notebook 10's pre-norm block with RMSNorm, rotary attention with QK-norm and the ReLU^2 feed-forward.

        x = x + dropout(attn(norm1(x), positions, cache, i))
        x = x + dropout(ffn(norm2(x)))

    Submodules: norm1, norm2 = RMSNorm(d_model); attn = RotaryAttention(d_model, h); ffn = ReLU2FeedForward(d_model, d_ff);
    dropout = nn.Dropout(dropout). x: (B, T, d_model), positions: (T,) -> (B, T, d_model)
    """

    def __init__(self, d_model, h, d_ff, dropout=0.0):
        super().__init__()
        self.norm1, self.attn = RMSNorm(d_model), RotaryAttention(d_model, h)
        self.norm2, self.ffn = RMSNorm(d_model), ReLU2FeedForward(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, positions, cache=None, i=0):
        x = x + self.dropout(self.attn(self.norm1(x), positions, cache, i))
        return x + self.dropout(self.ffn(self.norm2(x)))


class ModernGPT(nn.Module):
    """Notebook 10's GPT as trained today: ModernBlocks, RMSNorm, no position embeddings, zero-initialised outputs.

    Submodules: tok_embed = nn.Embedding(V, d_model); dropout = nn.Dropout(dropout), on the token embeddings;
    blocks = nn.ModuleList of N ModernBlock(d_model, h, d_ff, dropout); norm_f = RMSNorm(d_model);
    head = nn.Linear(d_model, V, bias=False), whose weight IS tok_embed.weight.
    Initialised as notebook 10's GPT (init_weights), then every projection that writes into the residual stream
    (each block's attn.W_o and ffn.W_2) set to zero, so that each block starts as the identity.
    idx: (B, T) token ids -> (logits (B, T, V), loss or None), as notebook 10's GPT.
    The tokens' positions, start .. start + T - 1 with start = cache.length (0 without a cache), are read once,
    before the first block, and every block rotates with them; start + T <= block_size.
    """

    def __init__(self, V, *, d_model, h, d_ff, N, block_size, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.tok_embed = nn.Embedding(V, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(ModernBlock(d_model, h, d_ff, dropout) for _ in range(N))
        self.norm_f = RMSNorm(d_model)
        self.head = nn.Linear(d_model, V, bias=False)
        self.head.weight = self.tok_embed.weight
        init_weights(self, N)
        for block in self.blocks:
            nn.init.zeros_(block.attn.W_o.weight)
            nn.init.zeros_(block.ffn.W_2.weight)

    def forward(self, idx, targets=None, cache=None):
        T, start = idx.size(1), 0 if cache is None else cache.length
        if start + T > self.block_size:
            raise ValueError(f"{start + T} positions, but the model has block_size = {self.block_size}: crop the input")
        positions = torch.arange(start, start + T, device=idx.device)
        x = self.dropout(self.tok_embed(idx))
        for i, block in enumerate(self.blocks):
            x = block(x, positions, cache, i)
        logits = self.head(self.norm_f(x))
        return logits, None if targets is None else lm_loss(logits, targets)


# ---------------------------------------------------------------- Muon


def newton_schulz(G, steps=5, eps=1e-7):
    """Muon's orthogonalisation: about U V^T for the SVD G = U S V^T, by a quintic Newton-Schulz iteration.

        X = G / max(||G||_F, eps)                       every singular value now at most 1
        X <- a X + (b A + c A A) X,  A = X X^T,   (a, b, c) = (3.4445, -4.7750, 2.0315),   `steps` times

    Each step maps every singular value s of X to a s + b s^3 + c s^5, which pushes it towards 1 from anywhere
    in (0, 1]; the vectors U and V never change. For a tall G (more rows than columns) the iteration runs on G^T,
    so that A is the smaller Gram matrix, and the result is turned back. In G's dtype (torch.optim.Muon: bfloat16).
    G: (m, n) -> (m, n)
    """
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G / G.norm().clamp(min=eps)
    tall = G.size(0) > G.size(1)
    if tall:
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tall else X


def split_parameters(model):
    """(hidden, other): the parameters Muon trains, and those AdamW trains.

    hidden: the matrices (2-D parameters) inside model.blocks: the projections of attention and feed-forward.
    other: every other parameter, once each: the embedding (and the head that shares it), the norms' gains, biases.
    Each a list of Parameters in model.named_parameters() order.
    """
    hidden = [p for name, p in model.named_parameters() if name.startswith("blocks.") and p.dim() == 2]
    chosen = {id(p) for p in hidden}
    return hidden, [p for p in model.parameters() if id(p) not in chosen]
