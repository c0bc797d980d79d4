"""Notebook 07's model for notebook 08, built from nn.TransformerEncoder / nn.TransformerDecoder, and
what training and looking inside it need: PyTorch's layer weights under the course's names, the
embedding initialisation of the recipe, and every attention map of a model, this one or yours."""
import math

import torch
from torch import nn

from course_lib.attention import causal_mask, hidden_positions
from course_lib.positional import sinusoidal_positional_encoding


def _course_names(mha):
    w, b = mha.in_proj_weight.detach(), mha.in_proj_bias.detach()
    d = w.size(1)
    state = {}
    for i, name in enumerate(["W_q", "W_k", "W_v"]):
        state[f"{name}.weight"], state[f"{name}.bias"] = w[i * d : (i + 1) * d].clone(), b[i * d : (i + 1) * d].clone()
    state["W_o.weight"], state["W_o.bias"] = mha.out_proj.weight.detach().clone(), mha.out_proj.bias.detach().clone()
    return state


def _layer_state(layer, attention):
    state = {f"{mine}.{k}": v for mine, theirs in attention.items() for k, v in _course_names(getattr(layer, theirs)).items()}
    for mine, theirs in (("W_1", "linear1"), ("W_2", "linear2")):
        state |= {f"ffn.{mine}.{k}": v.detach().clone() for k, v in getattr(layer, theirs).state_dict().items()}
    for i in range(1, len(attention) + 2):
        norm = getattr(layer, f"norm{i}")
        state |= {f"norm{i}.gamma": norm.weight.detach().clone(), f"norm{i}.beta": norm.bias.detach().clone()}
    return state


def encoder_layer_state_from_pytorch(layer):
    """The weights of an nn.TransformerEncoderLayer, named for the course's EncoderLayer."""
    return _layer_state(layer, {"self_attn": "self_attn"})


def decoder_layer_state_from_pytorch(layer):
    """The weights of an nn.TransformerDecoderLayer, named for the course's DecoderLayer."""
    return _layer_state(layer, {"self_attn": "self_attn", "cross_attn": "multihead_attn"})


class Transformer(nn.Module):
    """The encoder-decoder of notebook 07 (post-norm, ReLU), built from nn.TransformerEncoder / Decoder.

    Same constructor and methods as the course's model: embeddings scaled by
    sqrt(d_model) plus the sinusoidal encoding, encode(src, src_mask) -> memory,
    decode(memory, tgt, src_mask, tgt_mask) -> logits, forward(src, tgt, src_mask, tgt_mask).
    Masks follow the course (True = allowed); the causal mask is always applied.
    Submodules: src_embed, tgt_embed, encoder, decoder (PyTorch's), out.
    counting: the model counts the calls of encode and decode it ran with gradients on, which the checks
    compare (what_it_saw): decoding runs without gradients.
    """

    def __init__(self, src_vocab, tgt_vocab, *, d_model=512, h=8, d_ff=2048, N=6, dropout=0.1, max_len=512,
                 tie_weights=False, share_embeddings=False, counting=False):
        super().__init__()
        self.d_model, self.h = d_model, h
        self.calls_with_gradients = 0 if counting else None
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.src_embed = self.tgt_embed if share_embeddings else nn.Embedding(src_vocab, d_model)
        layer = dict(d_model=d_model, nhead=h, dim_feedforward=d_ff, dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), N, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), N)
        self.out = nn.Linear(d_model, tgt_vocab)
        if tie_weights or share_embeddings:
            self.out.weight = self.tgt_embed.weight
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False)

    def embed(self, embedding, tokens):
        """(B, T) tokens -> (B, T, d_model)."""
        x = embedding(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)].to(embedding.weight.dtype)
        return self.dropout(x)

    def what_it_saw(self):
        """{what: count} for the checks' comparison, when counting: the calls of encode and decode run with
        gradients on (torch.no_grad() makes them 0)."""
        if self.calls_with_gradients is None:
            return {}
        return {"model's calls with gradients on (torch.no_grad() makes them 0)": self.calls_with_gradients}

    def _count(self):
        if self.calls_with_gradients is not None:
            self.calls_with_gradients += torch.is_grad_enabled()

    def _pytorch_mask(self, allowed, B, T_q, T_k):
        return None if allowed is None else hidden_positions(allowed, B, self.h, T_q, T_k)[0]

    def encode(self, src, src_mask=None):
        """(B, T_src) tokens -> memory (B, T_src, d_model)."""
        self._count()
        B, T = src.shape
        return self.encoder(self.embed(self.src_embed, src), mask=self._pytorch_mask(src_mask, B, T, T))

    def decode(self, memory, tgt, src_mask=None, tgt_mask=None):
        """Logits (B, T_tgt, tgt_vocab) for the next token at every target position."""
        self._count()
        (B, T), T_src = tgt.shape, memory.size(1)
        allowed = causal_mask(T, device=tgt.device)
        if tgt_mask is not None:
            allowed = allowed & tgt_mask
        x = self.decoder(self.embed(self.tgt_embed, tgt), memory, tgt_mask=self._pytorch_mask(allowed, B, T, T),
                         memory_mask=self._pytorch_mask(src_mask, B, T, T_src))
        return self.out(x)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.decode(self.encode(src, src_mask), tgt, src_mask, tgt_mask)


def attention_maps(model, src, ys, pad_id=0):
    """Every attention map of a Transformer (yours, or the one above) while it reads src and writes ys.

    src: (B, T_src), ys: (B, T_tgt) with <bos> first
    returns {"encoder self-attention": [...], "decoder self-attention": [...], "cross-attention": [...]},
    each a list over layers of weights (B, h, T_q, T_k)
    """
    maps = {"encoder self-attention": [], "decoder self-attention": [], "cross-attention": []}
    attentions = [(layer.self_attn, "encoder self-attention") for layer in model.encoder.layers]
    for layer in model.decoder.layers:
        cross = layer.cross_attn if hasattr(layer, "cross_attn") else layer.multihead_attn  # the course's name, PyTorch's
        attentions += [(layer.self_attn, "decoder self-attention"), (cross, "cross-attention")]
    busy = []

    def keep(kind):
        def hook(module, args, kwargs, output):
            if busy:
                return
            if isinstance(module, nn.MultiheadAttention):  # PyTorch's layers do not ask for the weights: ask again
                busy.append(module)
                masks = {k: v for k, v in kwargs.items() if k in ("attn_mask", "key_padding_mask")}
                output = module(*args[:3], **masks, need_weights=True, average_attn_weights=False)
                busy.clear()
            maps[kind].append(output[1].detach())
        return hook

    handles = [module.register_forward_hook(keep(kind), with_kwargs=True) for module, kind in attentions]
    was_training = model.training
    try:
        # with gradients on, nn.TransformerEncoderLayer takes its attention module, not its fused fast path
        with torch.enable_grad():
            model.eval()
            model(src, ys, (src != pad_id).unsqueeze(1))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return maps


def cross_attention(model, src, ys, layer=-1, pad_id=0):
    """The cross-attention weights of one decoder layer while reading ys: (B, h, T_tgt, T_src).

    Row t = where the decoder looked to predict token t + 1.
    """
    return attention_maps(model, src, ys, pad_id)["cross-attention"][layer]


def init_embeddings(model):
    """Draw the token embeddings with std d_model^-0.5, in place; returns the model.

    The model multiplies embeddings by sqrt(d_model), so their entries then have root
    mean square 1, about the size of the sinusoidal positions they are added to
    (1/sqrt(2), about 0.71). The paper's authors' Tensor2Tensor code pairs the factor
    with this start, and fairseq draws its embeddings at the same scale. With
    nn.Embedding's default N(0, 1), which notebook 07's Transformer keeps, the tokens
    would have root mean square sqrt(d_model) (8 at d_model = 64, about 11 times the
    positions'), and a small model confuses the order of digits (1998 -> 1989).
    """
    # in a fixed order, the target's first, and once when they are one table: a set would draw them in the order of
    # the objects' addresses, so that one seed could give two different models
    for embedding in dict.fromkeys((model.tgt_embed, model.src_embed)):
        torch.nn.init.normal_(embedding.weight, std=embedding.embedding_dim**-0.5)
    return model
