"""Reference implementation of the course, one module per topic.

Written to be read: every function states its shapes, and every name means
one thing in every module, the course's notation:

    B        batch size                      T        sequence length
    T_q      number of queries               T_k      number of keys (and values)
    T_src    source length                   T_tgt    target length
    d_model  width of every token vector     h        number of attention heads
    d_k      width of a query / key (a head) d_v      width of a value
    d_ff     hidden width of the feed-forward network
    N        number of encoder (decoder) layers
    d_in     width of an RNN's input         d_h      width of an RNN's hidden state
    h_t, c_t an RNN's hidden and LSTM's cell state at step t
    V        vocabulary size

Tensors are batch-first, (B, T, d_model). A boolean mask is True where
attention is allowed. Sizes come in one order: d_model, h, d_ff, N.
The code is the lesson: each formula is written out as a notebook has the
learner write it; solutions_lib.fast holds the fused variants that training
and the benchmarks use. Nothing here knows about grading.
Import a topic's module (`from solutions_lib import attention`); the names
below are also reachable as `solutions_lib.<name>`, loaded on first use so that
importing the package loads no topic.
"""
import importlib
import time

# `python -m solutions_lib.train` (or .gpt) imports this package first, before torch: the
# command's start, from which it counts its seconds
START = time.perf_counter()

_EXPORTS = {
    name: "attention"
    for name in ("SelfAttention", "attention_scores", "causal_mask", "padding_mask", "qkv_projections", "scaled_dot_product_attention")
}


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"solutions_lib.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'solutions_lib' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
