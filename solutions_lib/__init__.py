"""Reference implementation of the course, one module per topic.

Written to be read: every function states its shapes, and the names follow
the notation of the course (B batch, T sequence length, d_model, d_k, h heads).
"""
from solutions_lib.attention import (
    SelfAttention,
    attention_scores,
    causal_mask,
    padding_mask,
    qkv_projections,
    scaled_dot_product_attention,
)

__all__ = [
    "SelfAttention",
    "attention_scores",
    "causal_mask",
    "padding_mask",
    "qkv_projections",
    "scaled_dot_product_attention",
]
