"""Training the notebook 10 GPT against the same model built from PyTorch's own modules, as a ratio.

    python benchmarks/bench_gpt.py                     # the device's recipe (CPU: 71 s a model, GPU: 44 s)
    python benchmarks/bench_gpt.py --max-seconds 15    # a quick look
    python benchmarks/bench_gpt.py --max-steps 1000 --max-seconds 0   # a schedule of steps instead of seconds

Trains, one after the other in one run, solutions_lib.gpt's GPT (with solutions_lib.fast's fused
kernels, as the command trains it) and TorchGPT below: the same embeddings, final norm and tied
output layer around N nn.TransformerEncoderLayer(norm_first=True) run with a causal mask. Same
data and tokenizer (Tiny Shakespeare, 90 % / 10 %), same initialisation rule, same batches (same
seed) and the same schedule (solutions_lib.gpt.train.fit with one Config). It prints the held-out nats
per character against seconds of training (evaluations excluded) for both, the Markov baselines
on the same tokens, and last the ratio of the seconds each needs to reach TorchGPT's best held-out
nats per character, within --tolerance (target: at most 0.8). A model reaches a score at the first
evaluation at or below it, so --eval-every sets the resolution. Timings are only comparable within
one run.
"""
import argparse
from dataclasses import replace

import torch
from torch import nn

from solutions_lib.gpt import GPT, init_weights, lm_loss
from solutions_lib.gpt.data import markov_nats_per_char
from solutions_lib.gpt.train import fit, load_data, recipe
from solutions_lib.train import process_device


class TorchGPT(GPT):
    """GPT with PyTorch's blocks: nn.TransformerEncoder of N pre-norm nn.TransformerEncoderLayer
    (ReLU, batch_first) under a causal mask, and nn.LayerNorm as the final norm. Same constructor,
    embeddings, tied output layer and initialisation as GPT; no KV cache."""

    def __init__(self, V, *, d_model, h, d_ff, N, block_size, dropout=0.0):
        super().__init__(V, d_model=d_model, h=h, d_ff=d_ff, N=N, block_size=block_size, dropout=dropout)
        layer = nn.TransformerEncoderLayer(d_model, h, d_ff, dropout, activation="relu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, N, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(d_model)
        init_weights(self, N, residual=("self_attn.out_proj", "linear2"))

    def forward(self, idx, targets=None):
        T = idx.size(1)
        future = nn.Transformer.generate_square_subsequent_mask(T, device=idx.device)  # -inf above the diagonal
        x = self.blocks(self.embed(idx), mask=future, is_causal=True)
        logits = self.head(self.ln_f(x))
        return logits, None if targets is None else lm_loss(logits, targets)


def seconds_to_reach(history, target):
    """Training seconds at the first evaluation at or below target nats per character (inf if none)."""
    return next((s for s, score in zip(history["seconds"], history["held_out"]) if score <= target), float("inf"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-seconds", type=float, default=None, help="training seconds a model (default: the recipe's)")
    parser.add_argument("--max-steps", type=int, default=None, help="steps a model (default: the recipe's)")
    parser.add_argument("--eval-every", type=int, default=100, help="steps between held-out evaluations")
    parser.add_argument("--tokenizer", choices=["bpe", "char"], default=None)
    parser.add_argument("--k", type=float, default=0.1, help="add-k smoothing of the Markov baselines")
    parser.add_argument("--tolerance", type=float, default=0.01, help="nats per character that still count as reaching")
    args = parser.parse_args()
    dev = process_device(0)
    given = {"max_seconds": args.max_seconds, "max_steps": args.max_steps, "tokenizer": args.tokenizer}
    cfg = replace(recipe(dev), eval_every=args.eval_every, **{k: v for k, v in given.items() if v is not None})
    data = load_data(cfg)
    V, chars = data["tokenizer"].V, data["held_out_chars"]
    print(f"device {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}; tokenizer {cfg.tokenizer}, V = {V}; "
          f"d_model={cfg.d_model} h={cfg.h} d_ff={cfg.d_ff} N={cfg.N} block_size={cfg.block_size} B={cfg.batch_size}")
    for order, name in enumerate(["unigram", "bigram", "trigram"]):
        score = markov_nats_per_char(data["train"], data["held_out"], order, V, chars, k=args.k)
        print(f"Markov {name} (add-{args.k:g}): held-out {score:.3f} nats per character")
    runs = {}
    for name, model_class in (("solutions_lib", None), ("torch", TorchGPT)):
        result = fit(cfg, progress=False, log=lambda line: None, data=data, model_class=model_class)
        runs[name] = result["history"]
        print(f"{name:>13}: {result['steps']} steps, {result['tokens_per_second']:.0f} tokens/s, "
              f"final held-out {result['held_out']:.3f} nats per character")
    print("held-out nats per character against seconds of training:")
    ours, theirs = runs["solutions_lib"], runs["torch"]
    for i in range(max(len(ours["step"]), len(theirs["step"]))):
        cells = [f"step {h['step'][i]:6d} {h['seconds'][i]:7.1f} s {h['held_out'][i]:.3f}" if i < len(h["step"]) else ""
                 for h in (ours, theirs)]
        print(f"  solutions_lib {cells[0]:<29} torch {cells[1]}")
    target = min(theirs["held_out"]) + args.tolerance
    t_ours, t_theirs = seconds_to_reach(ours, target), seconds_to_reach(theirs, target)
    print(f"time to torch's best held-out + {args.tolerance:g} = {target:.3f} nats per character: "
          f"solutions_lib {t_ours:.1f} s, torch {t_theirs:.1f} s")
    print(f"time to torch's best ratio (solutions_lib / torch, target at most 0.8): {t_ours / t_theirs:.2f}")


if __name__ == "__main__":
    main()
