"""The notebook 10 GPT side by side with a same-size model of PyTorch's own modules, nanoGPT's documented
CPU configuration, and the counting models (Kneser-Ney, Jelinek-Mercer); and, as a ratio, how fast it reaches the first's best.

    python benchmarks/bench_gpt.py                     # the device's recipe (CPU: 71 s a model, GPU: 44 s)
    python benchmarks/bench_gpt.py --max-seconds 15    # a quick look
    python benchmarks/bench_gpt.py --max-steps 1000 --max-seconds 0   # a schedule of steps instead of seconds
    python benchmarks/bench_gpt.py --no-nanogpt        # without nanoGPT's runs (2000 steps each)
    python benchmarks/bench_gpt.py --plot gpt.png      # also draws held-out nats against seconds, the counting models as lines

Trains, one after the other in one run, solutions_lib.gpt's GPT (with solutions_lib.fast's fused
kernels, as the command trains it) and TorchGPT below: the same embeddings, final norm and tied
output layer around N nn.TransformerEncoderLayer(norm_first=True) run with a causal mask. Same
data and tokenizer (Tiny Shakespeare, 90 % / 10 %), same initialisation rule, same batches (same
seed) and the same schedule (solutions_lib.gpt.train.fit with one Config). It prints the held-out nats
per character against seconds of training (evaluations excluded) for both, the Markov baselines
on the same tokens, and last the ratio of the seconds each needs to reach TorchGPT's best held-out
nats per character, within --tolerance (target: at most 0.8). A model reaches a score at the first
evaluation at or below it, so --eval-every sets the resolution.

Then NanoGPT below, nanoGPT's shakespeare-char model reimplemented from its published CPU
configuration (one id per character, 4 layers, 4 heads, 128 wide, block 64, batch 12, 2000 steps,
dropout 0, learning rate 1e-3 to 1e-4 after 100 steps of warm-up, AdamW betas 0.9/0.99, float32 as
nanoGPT runs on a CPU), trained by the same loop, and the same configuration on the recipe's tokens
(how much of its gap to the recipe is the tokens); and the counting models of notebook 10
(course_lib.ngram) on the recipe's tokens: interpolated Kneser-Ney (modified, three discounts) as a 3- to
6-gram, and Jelinek-Mercer's interpolated 4-gram. Last, a table of each one's held-out nats per character
and seconds, and the margin of the course's GPT below the best Kneser-Ney order.

Every GPT is scored by course_lib.gpt_training.held_out_loss, the command's and notebook 10's evaluation:
every held-out token once, each after the first block with at least half a block of context (windows of
block_size every block_size // 2 tokens); the table adds, as a remark, the course's GPT scored by windows
side by side (stride block_size), the older figure. Timings are only comparable within one run.
"""
import argparse
import math
import time
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.gpt_training import Config, held_out_loss
from course_lib.ngram import interpolated_nats_per_char, kneser_ney_nats_per_char
from course_lib.training import amp_dtype, describe_precision, precision, process_device
from solutions_lib.gpt import GPT, init_weights, lm_loss
from solutions_lib.gpt.data import markov_nats_per_char, nats_per_char
from solutions_lib.gpt.train import fit, load_data, recipe

# nanoGPT's README, "I only have a macbook": train_shakespeare_char.py with these flags (its CPU run)
NANOGPT_CPU = Config(tokenizer="char", d_model=128, h=4, d_ff=512, N=4, block_size=64, batch_size=12, dropout=0.0,
                     lr=1e-3, min_lr=1e-4, warmup=100, weight_decay=0.1, clip=1.0, max_steps=2000, max_seconds=0.0,
                     bf16=False)


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


class NanoGPT(nn.Module):
    """nanoGPT's model: pre-norm blocks (LayerNorm without bias, causal attention by one c_attn product and
    F.scaled_dot_product_attention, a 4x MLP with GELU), learned positions, a final LayerNorm and an output layer
    tied to the token embedding; weights N(0, 0.02^2), the residual projections 0.02 / sqrt(2N). GPT's constructor."""

    def __init__(self, V, *, d_model, h, d_ff, N, block_size, dropout=0.0):
        super().__init__()
        self.h, self.block_size = h, block_size
        self.wte, self.wpe = nn.Embedding(V, d_model), nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln_1": nn.LayerNorm(d_model, bias=False), "c_attn": nn.Linear(d_model, 3 * d_model, bias=False),
            "c_proj": nn.Linear(d_model, d_model, bias=False), "ln_2": nn.LayerNorm(d_model, bias=False),
            "c_fc": nn.Linear(d_model, d_ff, bias=False), "mlp_proj": nn.Linear(d_ff, d_model, bias=False)})
            for _ in range(N))
        self.ln_f = nn.LayerNorm(d_model, bias=False)
        self.lm_head = nn.Linear(d_model, V, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * N) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            q, k, v = b["c_attn"](b["ln_1"](x)).view(B, T, 3, self.h, -1).permute(2, 0, 3, 1, 4)
            x = x + b["c_proj"](F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1))
            x = x + b["mlp_proj"](F.gelu(b["c_fc"](b["ln_2"](x))))
        logits = self.lm_head(self.ln_f(x))
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
    parser.add_argument("--nanogpt", action=argparse.BooleanOptionalAction, default=True,
                        help="train nanoGPT's CPU configuration too (2000 steps), on characters and on the recipe's tokens")
    parser.add_argument("--plot", default=None, help="a PNG file: both GPTs' held-out nats per character against seconds, "
                        "with the counting models as lines")
    args = parser.parse_args()
    dev = process_device(0)
    given = {"max_seconds": args.max_seconds, "max_steps": args.max_steps, "tokenizer": args.tokenizer}
    cfg = replace(recipe(dev), eval_every=args.eval_every, **{k: v for k, v in given.items() if v is not None})
    data = load_data(cfg)
    V, chars = data["tokenizer"].V, data["held_out_chars"]
    low = amp_dtype(dev, cpu=True)  # what bf16=True trains in here: bfloat16, float16 (an older GPU) or None (float32)
    print(f"device {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}; tokenizer {cfg.tokenizer}, V = {V}; "
          f"d_model={cfg.d_model} h={cfg.h} d_ff={cfg.d_ff} N={cfg.N} block_size={cfg.block_size} B={cfg.batch_size}; "
          f"training {describe_precision(dev, cpu=True, enabled=cfg.bf16)}")
    for order, name in enumerate(["unigram", "bigram", "trigram"]):
        score = markov_nats_per_char(data["train"], data["held_out"], order, V, chars, k=args.k)
        print(f"Markov {name} (add-{args.k:g}): held-out {score:.3f} nats per character")
    runs, results = {}, {}
    for name, model_class in (("solutions_lib", None), ("torch", TorchGPT)):
        result = fit(cfg, progress=False, log=lambda line: None, data=data, model_class=model_class)
        runs[name], results[name] = result["history"], result
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
    ratio = t_ours / t_theirs
    print(f"time to torch's best ratio (solutions_lib / torch, target at most 0.8): {ratio:.2f}")
    rows = [("the course's recipe (solutions_lib.gpt)", cfg, results["solutions_lib"]),
            ("the same, PyTorch's modules (TorchGPT)", cfg, results["torch"])]
    if args.nanogpt:
        nano = fit(NANOGPT_CPU, progress=False, log=lambda line: None, data=load_data(NANOGPT_CPU), model_class=NanoGPT)
        rows.append(("nanoGPT's CPU configuration (NanoGPT)", NANOGPT_CPU, nano))
        # the same, on the recipe's tokens instead of characters: how much of the gap the tokens are
        tokens = replace(NANOGPT_CPU, tokenizer=cfg.tokenizer, vocab_size=cfg.vocab_size)
        nano = fit(tokens, progress=False, log=lambda line: None, data=data, model_class=NanoGPT)
        rows.append(("the same on the recipe's tokens", tokens, nano))
    counting = {}  # name: (held-out nats per character, seconds to fit and score)
    for order in (2, 3, 4, 5):
        start = time.perf_counter()
        score, _ = kneser_ney_nats_per_char(data["train"], data["held_out"], order, V, chars)
        counting[f"Kneser-Ney {order + 1}-gram (course_lib.ngram)"] = (score, time.perf_counter() - start)
    start = time.perf_counter()
    score, _ = interpolated_nats_per_char(data["train"], data["held_out"], 3, V, chars)
    counting["Jelinek-Mercer 4-gram (course_lib.ngram)"] = (score, time.perf_counter() - start)
    course = results["solutions_lib"]
    autocast, _ = precision(dev, cpu=True, enabled=cfg.bf16)
    with autocast():  # the older figure, windows side by side: the first tokens of each read almost nothing
        side_by_side = nats_per_char(*held_out_loss(course["model"], data["held_out"], cfg.block_size, stride=cfg.block_size),
                                     chars)
    print()
    print(f"{'':42} {'held-out nats/char':>18} {'steps':>6} {'tokens/s':>9} {'seconds':>8}")
    for name, c, r in rows:
        print(f"{name:42} {r['held_out']:18.3f} {r['steps']:6d} {r['tokens_per_second']:9,.0f} {r['seconds']:8.1f}"
              f"   {c.tokenizer}, d_model {c.d_model}, N {c.N}, block {c.block_size}, B {c.batch_size}"
              f"{', ' + str(low).removeprefix('torch.') if c.bf16 and low else ''}")
    for name, (score, seconds) in counting.items():
        print(f"{name:42} {score:18.3f} {'':6} {'':9} {seconds:8.1f}   counted on the recipe's tokens")
    print("seconds: a model's training and its evaluations, its data already loaded; the command adds its start-up "
          "(tokenizing included) to these")
    print(f"GPTs scored fairly: every held-out token once, each after the first {cfg.block_size} with at least "
          f"{cfg.block_size - cfg.block_size // 2 + 1} tokens of context (course_lib.gpt_training.held_out_loss). "
          f"Remark: the course's GPT scored by windows of {cfg.block_size} side by side, the older figure: {side_by_side:.3f}")
    kn = {name: score for name, (score, _) in counting.items() if name.startswith("Kneser-Ney")}
    best = min(kn, key=kn.get)
    margin = kn[best] - course["held_out"]
    level = seconds_to_reach(course["history"], kn[best])
    print(f"margin: the course's GPT {course['held_out']:.3f} against the best Kneser-Ney order, the {best.split(' (')[0]} "
          f"{kn[best]:.3f}: {margin:+.3f} nats per character ({'ahead' if margin > 0 else 'behind'}; target at least +0.05); "
          + (f"first at or below it at the evaluation after {level:.1f} s of training" if math.isfinite(level)
             else "never at or below it at an evaluation"))
    if args.plot:
        plot(args.plot, runs, counting, dev)


def plot(path, runs, counting, dev):
    """Held-out nats per character against seconds of training for each GPT run, each counting model a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, history in runs.items():
        ax.plot(history["seconds"], history["held_out"], "o-", ms=3, label=f"GPT ({name}), {history['held_out'][-1]:.3f}")
    for (name, (score, _)), color in zip(counting.items(), ["tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:green"]):
        ax.axhline(score, color=color, ls="--", lw=1, label=f"{name.split(' (')[0]}, {score:.3f}")
    scores = [h for history in runs.values() for h in history["held_out"]] + [s for s, _ in counting.values()]
    ax.set_ylim(min(scores) - 0.03, min(max(scores), 2.0) + 0.03)
    ax.set_xlabel("seconds of training"); ax.set_ylabel("held-out nats per character (every token once)")
    ax.set_title(f"{dev.type}: the GPT against the counting models"); ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
