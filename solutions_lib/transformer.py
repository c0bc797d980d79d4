"""The encoder-decoder Transformer of "Attention Is All You Need" (notebook 07).

Post-norm, as in the paper: every sublayer is wrapped as
    x = LayerNorm(x + Dropout(Sublayer(x)))
Masks are boolean and True where attention is allowed. Tensors are batch-first.
Sizes come in one order everywhere: d_model, h, d_ff, N (keyword-only in Transformer).
solutions_lib.fast swaps in PyTorch's fused kernels for training.
"""
import math

import torch
from torch import nn

from solutions_lib.positional import sinusoidal_positional_encoding

from solutions_lib.attention import causal_mask
from solutions_lib.multihead import MultiHeadAttention, mha_state_from_pytorch


class LayerNorm(nn.Module):
    """Normalise each token vector over its d_model features, then scale and shift.

    y = gamma * (x - mean) / sqrt(var + eps) + beta, with the biased variance
    (divide by d_model), mean and var taken over the last axis only.
    Parameters: gamma (d_model,) initialised to 1, beta (d_model,) initialised to 0.
    x: (..., d_model) -> (..., d_model)
    """

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class FeedForward(nn.Module):
    """Position-wise feed-forward network: W_2(Dropout(ReLU(W_1 x))).

    Submodules: W_1 = nn.Linear(d_model, d_ff), W_2 = nn.Linear(d_ff, d_model), dropout = nn.Dropout(dropout).
    x: (B, T, d_model) -> (B, T, d_model); every position is transformed alike.
    """

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.W_1 = nn.Linear(d_model, d_ff)
        self.W_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.W_2(self.dropout(torch.relu(self.W_1(x))))


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each with add & norm (post-norm).

    Submodules: self_attn = MultiHeadAttention(d_model, h, dropout), ffn = FeedForward(d_model, d_ff, dropout),
    norm1, norm2 = LayerNorm(d_model), dropout = nn.Dropout(dropout).
    x: (B, T, d_model); mask: bool broadcastable to (B, T, T), True = allowed
    returns: (B, T, d_model)
    """

    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        attended, _ = self.self_attn(x, x, x, mask)
        x = self.norm1(x + self.dropout(attended))
        return self.norm2(x + self.dropout(self.ffn(x)))


class Encoder(nn.Module):
    """N encoder layers, each fed the previous one's output.

    Submodules: layers = nn.ModuleList of N EncoderLayer(d_model, h, d_ff, dropout).
    x: (B, T_src, d_model); mask: bool broadcastable to (B, T_src, T_src)
    returns: (B, T_src, d_model), the memory the decoder attends to
    """

    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, h, d_ff, dropout) for _ in range(N))

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return x


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to memory, feed-forward; each with add & norm (post-norm).

    Submodules: self_attn, cross_attn = MultiHeadAttention(d_model, h, dropout), ffn = FeedForward(d_model, d_ff, dropout),
    norm1, norm2, norm3 = LayerNorm(d_model), dropout = nn.Dropout(dropout).
    x: (B, T_tgt, d_model); memory: (B, T_src, d_model), the encoder's output
    src_mask: bool broadcastable to (B, T_tgt, T_src), the source positions each query may read
    tgt_mask: bool broadcastable to (B, T_tgt, T_tgt), usually causal (& target padding)
    returns: (B, T_tgt, d_model)
    """

    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.cross_attn = MultiHeadAttention(d_model, h, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        attended, _ = self.self_attn(x, x, x, tgt_mask)
        x = self.norm1(x + self.dropout(attended))
        attended, _ = self.cross_attn(x, memory, memory, src_mask)
        x = self.norm2(x + self.dropout(attended))
        return self.norm3(x + self.dropout(self.ffn(x)))


class Decoder(nn.Module):
    """N decoder layers; every layer attends to the same encoder output (memory).

    Submodules: layers = nn.ModuleList of N DecoderLayer(d_model, h, d_ff, dropout).
    x: (B, T_tgt, d_model); memory: (B, T_src, d_model); masks as in DecoderLayer
    returns: (B, T_tgt, d_model)
    """

    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(d_model, h, d_ff, dropout) for _ in range(N))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return x


def sinusoidal_encoding(max_len, d_model):
    """Notebook 04's sinusoidal positional encoding, as a float32 table: (max_len, d_model)."""
    return sinusoidal_positional_encoding(max_len, d_model)


class Transformer(nn.Module):
    """Embeddings (scaled by sqrt(d_model)) + sinusoidal positions, encoder, decoder, output projection.

    Submodules: src_embed, tgt_embed = nn.Embedding(vocab, d_model), encoder = Encoder(...), decoder = Decoder(...),
    out = nn.Linear(d_model, tgt_vocab), dropout = nn.Dropout(dropout); buffer pe (max_len, d_model), not persistent.
    tie_weights: out.weight is tgt_embed.weight; share_embeddings: src_embed is tgt_embed too, and tied
    (needs src_vocab == tgt_vocab).
    src: (B, T_src), tgt: (B, T_tgt) integer tokens
    src_mask: bool broadcastable to (B, 1, T_src), True at real source tokens
    tgt_mask: optional extra bool mask broadcastable to (B, T_tgt, T_tgt); the causal mask is always applied too
    returns logits: (B, T_tgt, tgt_vocab)
    """

    def __init__(self, src_vocab, tgt_vocab, *, d_model=512, h=8, d_ff=2048, N=6, dropout=0.1, max_len=512,
                 tie_weights=False, share_embeddings=False):
        super().__init__()
        self.d_model = d_model
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.src_embed = self.tgt_embed if share_embeddings else nn.Embedding(src_vocab, d_model)
        self.encoder = Encoder(d_model, h, d_ff, N, dropout)
        self.decoder = Decoder(d_model, h, d_ff, N, dropout)
        self.out = nn.Linear(d_model, tgt_vocab)
        if tie_weights or share_embeddings:
            self.out.weight = self.tgt_embed.weight
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    def embed(self, embedding, tokens):
        """(B, T) tokens -> (B, T, d_model): dropout(sqrt(d_model) * embedding + positional encoding)."""
        x = embedding(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)]
        return self.dropout(x)

    def encode(self, src, src_mask=None):
        """(B, T_src) tokens -> memory (B, T_src, d_model)."""
        return self.encoder(self.embed(self.src_embed, src), src_mask)

    def decode(self, memory, tgt, src_mask=None, tgt_mask=None):
        """Logits (B, T_tgt, tgt_vocab) for the next token at every target position."""
        mask = causal_mask(tgt.size(1), device=tgt.device)
        if tgt_mask is not None:
            mask = mask & tgt_mask
        return self.out(self.decoder(self.embed(self.tgt_embed, tgt), memory, src_mask, mask))

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.decode(self.encode(src, src_mask), tgt, src_mask, tgt_mask)


# ---------------------------------------------------------------- PyTorch's weights


def _layer_norm_state(ln):
    return {"gamma": ln.weight.detach().clone(), "beta": ln.bias.detach().clone()}


def _prefixed(prefix, state):
    return {f"{prefix}.{k}": v for k, v in state.items()}


def encoder_layer_state_from_pytorch(layer):
    """The weights of an nn.TransformerEncoderLayer, named for EncoderLayer."""
    state = _prefixed("self_attn", mha_state_from_pytorch(layer.self_attn))
    state |= _prefixed("ffn", _linear_pair_state(layer))
    state |= _prefixed("norm1", _layer_norm_state(layer.norm1)) | _prefixed("norm2", _layer_norm_state(layer.norm2))
    return state


def decoder_layer_state_from_pytorch(layer):
    """The weights of an nn.TransformerDecoderLayer, named for DecoderLayer."""
    state = _prefixed("self_attn", mha_state_from_pytorch(layer.self_attn))
    state |= _prefixed("cross_attn", mha_state_from_pytorch(layer.multihead_attn))
    state |= _prefixed("ffn", _linear_pair_state(layer))
    for i in (1, 2, 3):
        state |= _prefixed(f"norm{i}", _layer_norm_state(getattr(layer, f"norm{i}")))
    return state


def _linear_pair_state(layer):
    return {
        "W_1.weight": layer.linear1.weight.detach().clone(), "W_1.bias": layer.linear1.bias.detach().clone(),
        "W_2.weight": layer.linear2.weight.detach().clone(), "W_2.bias": layer.linear2.bias.detach().clone(),
    }


def stack_state_from_pytorch(transformer):
    """The weights of an nn.Transformer's layers, named for Transformer's encoder and decoder.

    The paper's post-norm stacks have no final LayerNorm; nn.Transformer adds one
    (transformer.encoder.norm, transformer.decoder.norm): set them to None to compare.
    """
    state = {}
    for i, layer in enumerate(transformer.encoder.layers):
        state |= _prefixed(f"encoder.layers.{i}", encoder_layer_state_from_pytorch(layer))
    for i, layer in enumerate(transformer.decoder.layers):
        state |= _prefixed(f"decoder.layers.{i}", decoder_layer_state_from_pytorch(layer))
    return state
