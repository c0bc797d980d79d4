"""The lesson's Transformer with PyTorch's fused kernels, for training and the benchmarks.

multihead.py, transformer.py and gpt compute every formula step by step, as the
notebooks do. `fuse(model)` turns their LayerNorm, MultiHeadAttention and
GPT Block modules, in place, into the subclasses below: the same parameters
and the same function, computed by fused kernels. A fused attention returns no
weights (None), which training never needs.
"""
import torch
import torch.nn.functional as F

from solutions_lib.gpt import Block
from solutions_lib.multihead import MultiHeadAttention, merge_heads, split_heads
from solutions_lib.transformer import LayerNorm


class FusedLayerNorm(LayerNorm):
    """LayerNorm by F.layer_norm (one kernel), which needs x and the parameters in one dtype."""

    def forward(self, x):
        if x.dtype != self.gamma.dtype:
            return super().forward(x)
        return F.layer_norm(x, x.shape[-1:], self.gamma, self.beta, self.eps)


class FusedMultiHeadAttention(MultiHeadAttention):
    """MultiHeadAttention by F.scaled_dot_product_attention (flash or memory-efficient kernels on GPUs),
    with one matrix product for the projections that read the same tensor."""

    def forward(self, query, key, value, mask=None):
        q, k, v = self._project(query, key, value)
        if mask is not None:
            mask = mask.unsqueeze(-3)  # (B, 1, T_q, T_k): the same mask for every head
        p = self.dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        if mask is not None:  # a query with every key masked attends to nothing, as in the lesson
            out = out.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return self.W_o(merge_heads(out)), None

    def causal(self, x):
        """Causal self-attention of x (B, T, d_model): the causal mask as the kernel's own is_causal flag,
        which skips the blocks above the diagonal instead of reading a (T, T) mask."""
        q, k, v = self._project(x, x, x)
        p = self.dropout.p if self.training else 0.0
        return self.W_o(merge_heads(F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)))

    def _project(self, query, key, value):
        """Queries, keys and values, split into heads: (B, h, T, d_k) each."""
        if query is key and key is value:  # self-attention
            W = torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight])
            b = torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias])
            q, k, v = F.linear(query, W, b).chunk(3, dim=-1)
        elif key is value:  # cross-attention: keys and values read the same memory
            W = torch.cat([self.W_k.weight, self.W_v.weight])
            b = torch.cat([self.W_k.bias, self.W_v.bias])
            q, (k, v) = self.W_q(query), F.linear(key, W, b).chunk(2, dim=-1)
        else:
            q, k, v = self.W_q(query), self.W_k(key), self.W_v(value)
        return split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h)


class FusedBlock(Block):
    """A GPT Block whose causal self-attention, without a KV cache, is the kernel's is_causal."""

    def attend(self, x, cache=None, i=0):
        if cache is None and isinstance(self.attn, FusedMultiHeadAttention):
            return self.attn.causal(x)
        return super().attend(x, cache, i)


FUSED = {LayerNorm: FusedLayerNorm, MultiHeadAttention: FusedMultiHeadAttention, Block: FusedBlock}


def fuse(model):
    """Make every LayerNorm and MultiHeadAttention of `model` fused, in place; returns `model`."""
    for module in model.modules():
        if type(module) in FUSED:
            module.__class__ = FUSED[type(module)]
    return model
