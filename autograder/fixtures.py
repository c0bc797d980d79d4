"""Objects that checks pass to a learner's code: functions to call, models to train or decode with.

They live here, outside the assignment modules, because the student
distribution stores each public case's inputs (autograder.reference_data) and
must be able to load them without the assignment modules or the reference:
so every class here is picklable and built on torch and course_lib only.
"""
import torch
import torch.nn.functional as F
from torch import nn


class SelfAttentionFunction(nn.Module):
    """f(x) = the output of one self-attention head on x, after adding a fixed table of positions if given.

    x: (B, T, d_model) -> (B, T, d_model); positions: (T_max, d_model) or None
    """

    def __init__(self, d_model, positions=None):
        from course_lib.attention import SelfAttention  # here: the grading sandbox of notebook 05 has no SelfAttention

        super().__init__()
        self.attention = SelfAttention(d_model, d_model)
        self.positions = positions

    def forward(self, x):
        if self.positions is not None:
            x = x + self.positions[: x.size(1)].to(x.dtype)
        return self.attention(x)[0]


class LinearWarmup:
    """A LambdaLR factor that grows linearly to `peak` over `steps` steps (a lambda would not pickle)."""

    def __init__(self, peak, steps):
        self.peak, self.steps = peak, steps

    def __call__(self, step):
        return self.peak * min(1.0, (step + 1) / self.steps)


class CopyModel(nn.Module):
    """A hand-made 'trained' model that copies its source, then says <eos>, then babbles.

    Its logits at target position t favour src[:, t] (or <eos> once the source
    has ended, then token 3), so greedy decoding is fully predictable.
    """

    def __init__(self, V, noise_seed=0):
        super().__init__()
        self.V = V
        self.noise = torch.randn(V, generator=torch.Generator().manual_seed(noise_seed)) * 0.1

    def encode(self, src, src_mask=None):
        return src

    def decode(self, memory, tgt, src_mask=None, tgt_mask=None):
        B, T = tgt.shape
        padded = torch.cat([memory, torch.zeros(B, T + 2, dtype=torch.long)], dim=1)
        wanted = padded[:, :T].clone()
        after = padded[:, :T] == 0
        ended_before = torch.cat([torch.zeros(B, 1, dtype=torch.bool), after[:, :-1]], dim=1)
        wanted[after] = 2
        wanted[after & ended_before] = 3
        return 5.0 * F.one_hot(wanted, self.V).float() + self.noise

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.decode(self.encode(src, src_mask), tgt, src_mask, tgt_mask)
