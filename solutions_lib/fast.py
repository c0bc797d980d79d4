"""The lesson's Transformer with PyTorch's fused kernels, for training and the benchmarks.

multihead.py, transformer.py and gpt compute every formula step by step, as the
notebooks do. `fuse(model)` turns their LayerNorm, MultiHeadAttention and
GPT Block modules, in place, into the subclasses below: the same parameters
and the same function, computed by fused kernels. A fused attention returns no
weights (None), which training never needs.

On a CPU the fused Encoder also skips the padding: its token-wise layers (the
projections, the feed-forward network, the norms) see only the real tokens of
the batch, packed into one (N, d_model) matrix, and only attention sees the
(B, T) grid. The source mask keeps the decoder from reading the memory at
padded positions, so the logits are the same; the memory is 0 there instead of
a value computed from padding.
"""
import torch
import torch.nn.functional as F

from course_lib.modern import causal_attention  # on a CPU under bfloat16, attention in float32
from solutions_lib.gpt import Block
from solutions_lib.gpt.modern import RMSNorm, RotaryAttention, apply_rotary
from solutions_lib.multihead import MultiHeadAttention, merge_heads, split_heads
from solutions_lib.transformer import Encoder, EncoderLayer, LayerNorm

# From PyTorch 2.5 (pytorch/pytorch#133882) the kernels give a query whose keys are all masked
# the output 0, as the lesson's module does; before, they gave NaN.
KERNEL_ZEROES_EMPTY_ROWS = torch.__version__ >= (2, 5)


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
        if mask is not None and not KERNEL_ZEROES_EMPTY_ROWS:  # a query with every key masked attends to nothing
            out = out.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return self.W_o(merge_heads(out)), None

    def packed_self(self, x, keep, mask):
        """Self-attention of packed tokens: x (N, d_model), the real tokens of a (B, T) batch, at the
        flat positions keep (N,); mask (B, 1, T), True at the real tokens -> (N, d_model).
        Every real query has a real key, itself, so no row is empty."""
        B, T = mask.size(0), mask.size(-1)
        qkv = unpack(F.linear(x, *self._stacked(self.W_q, self.W_k, self.W_v)), keep, B, T)
        q, k, v = (split_heads(t, self.h) for t in qkv.chunk(3, dim=-1))
        p = self.dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(-3), dropout_p=p)
        return self.W_o(pack(merge_heads(out), keep))

    def causal(self, x):
        """Causal self-attention of x (B, T, d_model): the causal mask as the kernel's own is_causal flag,
        which skips the blocks above the diagonal instead of reading a (T, T) mask."""
        q, k, v = self._project(x, x, x)
        return self.W_o(merge_heads(causal_attention(q, k, v, self.dropout.p if self.training else 0.0)))

    def _project(self, query, key, value):
        """Queries, keys and values, split into heads: (B, h, T, d_k) each."""
        if query is key and key is value:  # self-attention
            q, k, v = F.linear(query, *self._stacked(self.W_q, self.W_k, self.W_v)).chunk(3, dim=-1)
        elif key is value:  # cross-attention: keys and values read the same memory
            q, (k, v) = self.W_q(query), F.linear(key, *self._stacked(self.W_k, self.W_v)).chunk(2, dim=-1)
        else:
            q, k, v = self.W_q(query), self.W_k(key), self.W_v(value)
        return split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h)

    @staticmethod
    def _stacked(*linears):
        """(weight, bias) of one nn.Linear that computes the given ones side by side."""
        return torch.cat([lin.weight for lin in linears]), torch.cat([lin.bias for lin in linears])


class FusedBlock(Block):
    """A GPT Block whose causal self-attention, without a KV cache, is the kernel's is_causal."""

    def attend(self, x, cache=None, i=0):
        if cache is None and isinstance(self.attn, FusedMultiHeadAttention):
            return self.attn.causal(x)
        return super().attend(x, cache, i)


class FusedRMSNorm(RMSNorm):
    """RMSNorm by F.rms_norm (one kernel)."""

    def forward(self, x):
        return F.rms_norm(x, x.shape[-1:], self.weight.to(x.dtype), self.eps)


class FusedRotaryAttention(RotaryAttention):
    """RotaryAttention whose causal attention, without a KV cache, is the kernel's is_causal."""

    def forward(self, x, positions, cache=None, i=0):
        if cache is not None:
            return super().forward(x, positions, cache, i)
        B, T, d_model = x.shape
        qkv = F.linear(x, torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight]))  # one product for the three
        if qkv.device.type == "cpu" and qkv.dtype == torch.bfloat16:  # a CPU's bfloat16 elementwise work is slow, and
            qkv = qkv.float()  # its attention runs in float32 anyway (causal_attention)
        q, k, v = (t.view(B, T, self.h, -1).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
        q, k = apply_rotary(self.q_norm(q), positions), apply_rotary(self.k_norm(k), positions)
        return self.W_o(causal_attention(q, k, v).transpose(1, 2).reshape(B, T, d_model))


def pack(x, keep):
    """(B, T, d) -> (N, d): the vectors at the flat positions keep (N,), b * T + t."""
    return x.reshape(-1, x.size(-1)).index_select(0, keep)


def unpack(x, keep, B, T):
    """Undo pack: (N, d) -> (B, T, d), with zeros at the positions not in keep."""
    return x.new_zeros(B * T, x.size(-1)).index_copy(0, keep, x).view(B, T, -1)


class FusedEncoderLayer(EncoderLayer):
    def packed(self, x, keep, mask):
        """EncoderLayer.forward on packed tokens: x (N, d_model), keep (N,), mask (B, 1, T) -> (N, d_model)."""
        x = self.norm1(x + self.dropout(self.self_attn.packed_self(x, keep, mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class FusedEncoder(Encoder):
    """An Encoder that, on a CPU, computes the real tokens only (see the module's docstring).

    On a GPU this small model waits on kernel launches rather than arithmetic, and finding the
    real tokens (nonzero) would make the host wait for the device: there it runs as the lesson's.
    """

    def forward(self, x, mask=None):
        B, T, _ = x.shape
        if not (x.device.type == "cpu" and mask is not None and mask.shape == (B, 1, T) and all(
                type(layer) is FusedEncoderLayer and type(layer.self_attn) is FusedMultiHeadAttention
                for layer in self.layers)):
            return super().forward(x, mask)
        keep = mask.reshape(B * T).nonzero().squeeze(1)
        tokens = pack(x, keep)
        for layer in self.layers:
            tokens = layer.packed(tokens, keep, mask)
        return unpack(tokens, keep, B, T)


FUSED = {LayerNorm: FusedLayerNorm, MultiHeadAttention: FusedMultiHeadAttention, Block: FusedBlock,
         EncoderLayer: FusedEncoderLayer, Encoder: FusedEncoder, RotaryAttention: FusedRotaryAttention,
         RMSNorm: FusedRMSNorm}


def fuse(model):
    """Make every LayerNorm, MultiHeadAttention, GPT Block, RMSNorm, RotaryAttention, EncoderLayer and Encoder of `model` fused,
    in place; returns `model`."""
    for module in model.modules():
        if type(module) in FUSED:
            module.__class__ = FUSED[type(module)]
    return model
