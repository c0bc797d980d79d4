"""Notebook 11's given code: a GPT that takes the changes one at a time, rotations by complex numbers, and Muon beside AdamW.

- rotate: rotary position embeddings computed as complex multiplications (Su et al., 2021, section 3.2): each pair of
  features (x_2i, x_2i+1) is the complex number x_2i + j x_2i+1, multiplied by e^(j t theta_i). The checks of
  apply_rotary compare with it; it shares no code with the real-valued formula of the exercise.
- VariantGPT: notebook 10's GPT with any subset of CHANGES, written on PyTorch's own modules (nn.LayerNorm,
  nn.RMSNorm, F.scaled_dot_product_attention), for the notebook's table of each change alone and together.
- MuonAdamW: torch.optim.Muon on the blocks' matrices and AdamW on every other parameter, as one optimizer.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

# What notebook 11 changes in notebook 10's GPT, in the order its table adds them
CHANGES = ("rms_norm", "rope", "qk_norm", "relu2", "zero_init", "muon")


def rotate(x, positions, base=10000.0):
    """Rotary position embeddings as complex numbers: x (..., T, d_k) with d_k even, positions (T,) -> x's shape and dtype."""
    d_k = x.size(-1)
    theta = base ** (-torch.arange(0, d_k, 2, device=x.device, dtype=torch.float64) / d_k)
    turn = torch.polar(torch.ones(len(positions), d_k // 2, dtype=torch.float64, device=x.device),
                       positions.to(device=x.device, dtype=torch.float64)[:, None] * theta)  # (T, d_k/2): e^(j t theta_i)
    z = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d_k // 2, 2).contiguous())
    return torch.view_as_real(z * turn).flatten(-2).to(x.dtype)


def causal_attention(q, k, v, dropout_p=0.0):
    """F.scaled_dot_product_attention with the kernel's own causal mask, q, k, v: (B, h, T, d_k) -> (B, h, T, d_k).

    On a CPU the bfloat16 kernel's backward pass is 4 times slower than the float32 one (torch 2.13, 24 windows of
    64 tokens, 4 heads: 5.8 ms against 1.5 ms for forward and backward): under bfloat16 autocast there, attention runs
    in float32 and the matrix products around it in bfloat16 (a GPT training step of notebook 10's CPU recipe on 2
    cores: 28 ms before, 17.5 ms after)."""
    if q.device.type == "cpu" and (q.dtype == torch.bfloat16 or torch.is_autocast_enabled("cpu")):
        with torch.autocast("cpu", enabled=False):
            out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), dropout_p=dropout_p, is_causal=True)
        return out.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)


class _Attention(nn.Module):
    """Causal self-attention with notebook 10's biases, or the rotary kind (no biases; QK-norm when asked)."""

    def __init__(self, d_model, h, rope, qk_norm):
        super().__init__()
        self.h, self.rope = h, rope
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model, bias=not rope) for _ in range(4))
        self.q_norm = nn.RMSNorm(d_model // h, eps=1e-6) if qk_norm else nn.Identity()
        self.k_norm = nn.RMSNorm(d_model // h, eps=1e-6) if qk_norm else nn.Identity()

    def forward(self, x, positions):
        B, T, d_model = x.shape
        q, k, v = (W(x).view(B, T, self.h, -1).transpose(1, 2) for W in (self.W_q, self.W_k, self.W_v))
        q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            q, k = rotate(q, positions), rotate(k, positions)
        out = causal_attention(q, k, v)
        return self.W_o(out.transpose(1, 2).reshape(B, T, d_model))


class _Block(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout, changes):
        super().__init__()
        norm = (lambda: nn.RMSNorm(d_model, eps=1e-6)) if "rms_norm" in changes else (lambda: nn.LayerNorm(d_model))
        self.norm1, self.norm2 = norm(), norm()
        self.attn = _Attention(d_model, h, "rope" in changes, "qk_norm" in changes)
        self.relu2 = "relu2" in changes
        self.W_1 = nn.Linear(d_model, d_ff, bias=not self.relu2)
        self.W_2 = nn.Linear(d_ff, d_model, bias=not self.relu2)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, positions):
        x = x + self.dropout(self.attn(self.norm1(x), positions))
        hidden = F.relu(self.W_1(self.norm2(x)))
        return x + self.dropout(self.W_2(hidden.square() if self.relu2 else hidden))


class VariantGPT(nn.Module):
    """Notebook 10's GPT with the `changes` named (a subset of CHANGES; "muon" is the optimizer's, not the model's).

    No change: LayerNorm, learned position embeddings, attention and a ReLU feed-forward with biases, nanoGPT's
    initialisation. rms_norm: every norm an RMSNorm. rope: no position embeddings, rotated queries and keys, the
    attention without biases. qk_norm: an RMSNorm on every head's queries and keys (rope or not). relu2: the
    feed-forward W_2 relu(W_1 x)^2, without biases. zero_init: the projections into the residual stream start at 0.
    The head shares the token embedding's matrix. idx (B, T), targets (B, T) or None -> (logits (B, T, V), loss or None)
    """

    def __init__(self, V, *, d_model, h, d_ff, N, block_size, dropout=0.0, changes=()):
        super().__init__()
        unknown = set(changes) - set(CHANGES)
        if unknown:
            raise ValueError(f"unknown changes {sorted(unknown)}; the changes are {', '.join(CHANGES)}")
        self.block_size, self.changes = block_size, tuple(changes)
        self.tok_embed = nn.Embedding(V, d_model)
        self.pos_embed = None if "rope" in changes else nn.Embedding(block_size, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(d_model, h, d_ff, dropout, changes) for _ in range(N))
        self.norm_f = nn.RMSNorm(d_model, eps=1e-6) if "rms_norm" in changes else nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, V, bias=False)
        self.head.weight = self.tok_embed.weight
        for name, p in self.named_parameters():  # nanoGPT's initialisation, as notebook 10's init_weights
            residual = name.endswith(("attn.W_o.weight", "W_2.weight"))
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * N) if residual else 0.02)
                if residual and "zero_init" in changes:
                    nn.init.zeros_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        positions = torch.arange(T, device=idx.device)
        x = self.tok_embed(idx) if self.pos_embed is None else self.tok_embed(idx) + self.pos_embed(positions)
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x, positions)
        logits = self.head(self.norm_f(x))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        return logits, loss


def block_matrices(model):
    """(hidden, other): the 2-D parameters inside model.blocks, and every other parameter once (notebook 11's split)."""
    hidden = [p for name, p in model.named_parameters() if name.startswith("blocks.") and p.dim() == 2]
    chosen = {id(p) for p in hidden}
    return hidden, [p for p in model.parameters() if id(p) not in chosen]


class MuonAdamW:
    """torch.optim.Muon on `hidden` (momentum 0.95, Nesterov, no weight decay) and AdamW on `other`, as one optimizer.

    Each param group carries lr_scale, its learning rate over the schedule's: a training loop sets
    group["lr"] = schedule * group["lr_scale"], so that Muon's rate (muon_lr) follows the same warm-up and decay.
    """

    def __init__(self, hidden, other, lr, muon_lr, weight_decay, betas=(0.9, 0.99)):
        decay = [p for p in other if p.dim() >= 2]
        rest = [p for p in other if p.dim() < 2]
        self.muon = torch.optim.Muon([{"params": hidden, "lr_scale": muon_lr / lr}], lr=muon_lr, momentum=0.95,
                                     weight_decay=0.0)
        self.adamw = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay, "lr_scale": 1.0},
                                        {"params": rest, "weight_decay": 0.0, "lr_scale": 1.0}], lr=lr, betas=betas)

    @property
    def param_groups(self):
        return self.muon.param_groups + self.adamw.param_groups

    def zero_grad(self, set_to_none=True):
        self.muon.zero_grad(set_to_none)
        self.adamw.zero_grad(set_to_none)

    def step(self, closure=None):
        self.muon.step()
        self.adamw.step()

    def state_dict(self):
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state):
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])
