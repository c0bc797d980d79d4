"""Reference implementation of the course, one module per topic.

Written to be read: every function states its shapes, and the names follow
the notation of the course (B batch, T sequence length, d_model, d_k, h heads).
Import a topic's module (`from solutions_lib import attention`); the names
below are also reachable as `solutions_lib.<name>`, loaded on first use so that
importing the package loads no topic.
"""
import importlib

_EXPORTS = {
    name: "attention"
    for name in ("SelfAttention", "attention_scores", "causal_mask", "padding_mask", "qkv_projections", "scaled_dot_product_attention")
}


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"solutions_lib.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'solutions_lib' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
