"""Notebook 10's recipe as a command: train a GPT on Tiny Shakespeare, and sample from it.

One training loop for two commands, which differ only in the building blocks (`Parts`) they hand it:
`python -m autograder.my_gpt train`, on your GPT, get_batch, ... from your notebook 10, and the
course's reference command, on the reference's blocks with fused kernels (the instructor's and the
benchmarks', which a class's distribution does not ship).

The budget of seconds counts from the command's start (`max_seconds`, held-out evaluations not
counted); the learning rate warms up, then decays over whichever comes first, max_steps or
max_seconds. The forward pass runs under bfloat16 autocast on a GPU of compute capability 8.0 or later (float16 with
a gradient scaler on an older one, a T4 or a V100: training.amp_choice, named in the run's first line), and on a CPU
with bfloat16 matrix units (runtime.cpu_bf16: a step about a quarter faster than in float32); under torchrun every process
trains on its share of each batch, and process 0 alone evaluates, prints and saves.

Held-out nats per character are measured fairly (held_out_loss): every held-out token is scored once, each
after the first block_size with at least half a block of context, by windows of block_size every
block_size // 2 tokens; the same function scores the GPT in notebook 10 and in benchmarks/bench_gpt.py.
"""
import argparse
import contextlib
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from course_lib import gpt as course_gpt
from course_lib import modern
from course_lib.text import shakespeare, split
from course_lib.training import (describe_precision, distributed, load_checkpoint, machine_class, RunningLoss, optimizer_step,
                                 precision, process_device)


# ---------------------------------------------------------------- the recipes


@dataclass
class Config:
    tokenizer: str = "bpe"  # bpe (notebook 09's, trained on the training part) or char
    vocab_size: int = 768  # bpe: 256 bytes + vocab_size - 256 merges
    d_model: int = 128  # sizes in the course's order: d_model, h, d_ff, N
    h: int = 4
    d_ff: int = 512
    N: int = 2
    block_size: int = 64
    dropout: float = 0.0
    batch_size: int = 24
    lr: float = 2e-3  # peak learning rate, after `warmup` steps; then a cosine down to min_lr
    min_lr: float = 2e-4
    warmup: int = 50
    weight_decay: float = 0.1
    clip: float = 1.0
    max_steps: int = 1_000_000
    max_seconds: float = 71.0  # training stops this many seconds after the command's start, evaluations not counted (0: none)
    eval_every: int = 0  # evaluate on the held-out text every this many steps (0: at the end only)
    seed: int = 0
    bf16: bool = True  # the forward pass under autocast: bfloat16 where the device multiplies it in hardware, float16
    # with a gradient scaler on an older GPU (training.amp_choice); False: float32
    model: str = "gpt"  # gpt (notebook 10's), modern (notebook 11's ModernGPT), or notebook 11's changes joined by "+"
    # (course_lib.modern.CHANGES, e.g. rms_norm+rope): notebook 10's GPT with those changes (VariantGPT)
    muon: bool = False  # Muon on the blocks' matrices at muon_lr, AdamW on the rest (notebook 11)
    muon_lr: float = 0.02


# 2 cores: 0.50 M parameters, bfloat16 where the CPU has it. Measured on 2 cores, bfloat16, 71 s (seed 0), scored by
# windows side by side: 4 blocks on BPE-512 tokens 1.58, on BPE-768 1.57; 3 blocks 1.545, 2 blocks 1.54, 2 blocks with
# batches of 24 1.53 (seeds 0-2: 1.531, 1.523, 1.533). Fewer blocks train more steps in the same time; longer tokens
# read more text a step. Scored fairly (held_out_loss), the 3200 steps that 2 quiet cores train in 71 s reach 1.507,
# 1.513 and 1.515 (seeds 0-2), against 1.530 for a 5-gram Kneser-Ney model on the same tokens (course_lib.ngram).
CPU = Config()
# The sizes and schedule of nanoGPT's shakespeare-char model (whose blocks use GELU and no biases, on characters): here
# 10.9 M parameters on BPE-384 tokens. On an H200, with the same steps,
# V = 384 reached 1.470 nats per character, V = 512 1.482 (its fewer tokens are seen more often: it overfits sooner)
GPU = Config(vocab_size=384, d_model=384, h=6, N=6, d_ff=1536, block_size=256, batch_size=64, dropout=0.2, lr=1e-3,
             min_lr=1e-4, warmup=100, max_seconds=44.0)


def check_config(cfg):
    """Raise ValueError for a Config that cannot train."""
    if cfg.tokenizer not in ("bpe", "char"):
        raise ValueError(f"tokenizer must be 'bpe' or 'char', not {cfg.tokenizer!r}")
    if cfg.tokenizer == "bpe" and cfg.vocab_size < course_gpt.N_BYTES:
        raise ValueError(f"a BPE vocabulary holds the {course_gpt.N_BYTES} bytes at least, not vocab_size {cfg.vocab_size}")
    if cfg.d_model % cfg.h:
        raise ValueError(f"d_model ({cfg.d_model}) must be a multiple of h ({cfg.h})")
    for name in ("d_model", "h", "N", "d_ff", "block_size", "batch_size", "max_steps"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be at least 1, not {getattr(cfg, name)}")
    if cfg.model not in ("gpt", "modern"):
        unknown = set(cfg.model.split("+")) - set(modern.CHANGES)
        if unknown:
            raise ValueError(f"model must be gpt, modern or changes of {'+'.join(modern.CHANGES)} joined by +, not {cfg.model!r}")
    if not 0 <= cfg.dropout < 1 or cfg.max_seconds < 0 or cfg.eval_every < 0:
        raise ValueError("dropout must lie in [0, 1), max_seconds and eval_every must be >= 0")


@dataclass(frozen=True)
class Expected:
    """What notebook 10's text expects of a recipe on one class of machine, as measured on one of that class: the
    steps a quiet machine trains in the recipe's max_seconds, and the held-out figures those steps reach, each a
    range (low, high) that the run's claims check on both sides. steps None: no machine of the class measured yet."""

    machine: str  # the machine it was measured on, and when; or the class, when none was
    steps: int | None = None
    held_out: tuple | None = None  # nats per character
    below_kn: tuple | None = None  # the best Kneser-Ney model's nats per character less the GPT's (negative: above it)
    below_jm: tuple | None = None  # the interpolated 4-gram's less the GPT's


RECIPES = {  # training.machine_class(dev, cpu=True): (the recipe, what the text expects of it)
    "cpu-bfloat16": (CPU, Expected("2 quiet cores of an AMD EPYC with AVX512-BF16 (2026-11-28)", 3500,
                                   held_out=(1.48, 1.56), below_kn=(-0.03, 0.05), below_jm=(0.07, 0.17))),
    "cpu-float32": (CPU, Expected("the same 2 cores in float32 (SEQCOURSE_PRECISION=float32, 2026-11-29)", 2000,
                                  held_out=(1.49, 1.58), below_kn=(-0.05, 0.04), below_jm=(0.05, 0.16))),
    "mps-float32": (CPU, Expected("Apple silicon's GPU")),
    "cuda-float16": (GPU, Expected("a T4-class GPU (float16 with a gradient scaler)")),
    "cuda-bfloat16": (GPU, Expected("one H200 (2026-11-27: the command, BPE-384, 2233 steps in 45 s)", 2200,
                                    held_out=(1.42, 1.52), below_kn=(0.0, 0.12), below_jm=(0.11, 0.24))),
}


# Notebook 11's recipe: ModernGPT (RMSNorm, rotary positions, QK-norm, ReLU^2, zero-initialised outputs), notebook 10's
# sizes and AdamW, on a CPU windows of 128 tokens, 12 a batch (the same tokens a step). Fixed steps, seed 0, bfloat16
# (benchmarks/bench_modern.py): at 2400 steps 1.486 (AdamW at 4e-3: 1.507); with Muon (0.02) on the blocks' matrices
# 1.489 after 1900 steps, which cost as much time as about 2500 without it: Muon's lead of 600 steps is gone by 1900
# (notebook 10's GPT 1.536, with Muon 1.533), so a CPU's minute trains without it. Windows of 64 x 24 at 1900 steps
# with Muon: 1.497; 256 x 6: 1.499; dropout 0.1: 1.507. On a GPU, the GPU recipe's sizes with Muon (not yet measured).
MODERN_CPU = replace(CPU, model="modern", block_size=128, batch_size=12)
MODERN_GPU = replace(GPU, model="modern", muon=True)
MODERN_RECIPES = {  # 72 s from the command's start in a fresh clone, quiet, two threads, seeds 0-2 (2026-12-02); beside
    # them, seed 0, notebook 10's recipe trained 1893 steps to 1.529 (bfloat16)
    "cpu-bfloat16": (MODERN_CPU, Expected("2 quiet cores of an AMD EPYC with AVX512-BF16 (2026-12-02: 1346 to 1404 steps, "
                                          "1.498 to 1.508 over seeds 0-2)", 1380, held_out=(1.48, 1.53), below_kn=(0.0, 0.05))),
    "cpu-float32": (MODERN_CPU, Expected("the same 2 cores in float32 (SEQCOURSE_PRECISION=float32, 2026-12-02: 976 to 1072 "
                                         "steps, 1.523 to 1.536)", 1010, held_out=(1.51, 1.56), below_kn=(-0.03, 0.02))),
    "mps-float32": (MODERN_CPU, Expected("Apple silicon's GPU")),
    "cuda-float16": (MODERN_GPU, Expected("a T4-class GPU (float16 with a gradient scaler)")),
    "cuda-bfloat16": (MODERN_GPU, Expected("an H100 or H200")),
}


def recipe_for(machine, modern=False):
    """(Config, Expected): the recipe for this class of machine (training.machine_class), and what the text expects of
    it there: notebook 10's, or with modern notebook 11's. A class the course has not measured (a forced precision:
    cpu-float16) gets the CPU recipe, no figures."""
    recipes, cpu = (MODERN_RECIPES, MODERN_CPU) if modern else (RECIPES, CPU)
    return recipes.get(machine, (cpu, Expected(f"{machine} (a forced precision)")))


def recipe(dev, modern=False):
    """The Config the command runs with no flags on device dev (its machine class's, recipe_for): notebook 10's, or
    with modern notebook 11's."""
    return recipe_for(machine_class(dev, cpu=True), modern)[0]


# ---------------------------------------------------------------- the building blocks


@dataclass
class Parts:
    """What a run trains and samples with: notebook 10's exercises (and notebook 09's BPE), the
    reference's or a learner's own. `build` may swap a freshly made GPT's modules for faster ones."""

    GPT: type
    get_batch: Callable  # (data, block_size, B, generator) -> x, y
    nats_per_char: Callable  # (loss per token, n_tokens, n_chars) -> nats per character
    generate: Callable  # (model, idx, max_new_tokens, use_cache, **sampling) -> idx
    beam_generate: Callable  # (model, idx (1, T), max_new_tokens, beam_size) -> (ids, log-probability); may raise Missing
    encode: Callable = course_gpt.encode  # (text, merges) -> ids
    decode: Callable = course_gpt.decode  # (ids, merges) -> text
    build: Callable = lambda model: model
    prog: str = "python -m autograder.my_gpt"
    ModernGPT: type = None  # notebook 11's, for cfg.model "modern"
    split_parameters: Callable = modern.block_matrices  # (model) -> (Muon's parameters, AdamW's), for cfg.muon


def windows(data, block_size, B, generator=None):
    """Notebook 10's get_batch by Tensor.unfold, for notebook 11: B random windows of block_size tokens (x) and the
    token after each position (y), (B, block_size) each, the same draws as the exercise's."""
    starts = torch.randint(len(data) - block_size, (B,), generator=generator).to(data.device)
    rows = data.unfold(0, block_size + 1, 1)[starts]  # (B, block_size + 1): a window and its last target
    return rows[:, :-1], rows[:, 1:]


def modern_parts(ModernGPT, split_parameters, prog="notebook 11"):
    """Parts for notebook 11's runs: cfg.model "modern" trains ModernGPT (with split_parameters for Muon), "gpt" and the
    changes' names train a VariantGPT; batches by windows, nats per character as notebook 10 defines them."""
    def cannot(*args, **kwargs):
        raise Missing(f"{prog} does not sample")
    return Parts(GPT=modern.VariantGPT, get_batch=windows, nats_per_char=lambda loss, n_tokens, n_chars: loss * n_tokens / n_chars,
                 generate=cannot, beam_generate=cannot, ModernGPT=ModernGPT, split_parameters=split_parameters, prog=prog)


class Missing(Exception):
    """An exercise a command needs that the learner's notebook cannot give yet (the message says why)."""


# ---------------------------------------------------------------- tokens


def cache_dir():
    """Where trained merges are kept: $SEQCOURSE_CACHE, else ~/.cache/seqcourse."""
    return Path(os.environ.get("SEQCOURSE_CACHE") or Path.home() / ".cache" / "seqcourse")


def cached_merges(train_text, vocab_size, folder=None):
    """learn_merges(train_text, vocab_size), kept in a file named by a hash of the text and vocab_size,
    so that only the first run on a text pays for the training."""
    key = hashlib.sha256(train_text.encode("utf-8")).hexdigest()[:16]
    path = Path(folder or cache_dir()) / f"bpe-{key}-{vocab_size}.json"
    if path.is_file():
        return [tuple(pair) for pair in json.loads(path.read_text())]
    print(f"learning {vocab_size - 256} BPE merges on {len(train_text):,} characters: the first run only, kept in {path.parent}",
          flush=True)  # several seconds, inside a run's budget of time
    merges = course_gpt.learn_merges(train_text, vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # processes that train at once never read half a file
    partial.write_text(json.dumps(merges))
    os.replace(partial, path)
    return merges


@dataclass
class Tokenizer:
    """Text <-> token ids: notebook 09's BPE (kind "bpe", its merges, by `bpe`'s encode and decode), or
    one id per character (kind "char", the sorted characters of the training text: id i is chars[i])."""

    kind: str
    merges: list = None
    chars: str = None
    bpe: tuple = (course_gpt.encode, course_gpt.decode)

    @property
    def V(self):
        return course_gpt.N_BYTES + len(self.merges) if self.kind == "bpe" else len(self.chars)

    def encode(self, text):
        """list of ids; a character the character-level vocabulary lacks raises ValueError."""
        if self.kind == "bpe":
            return self.bpe[0](text, self.merges)
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - set(index))
        if unknown:
            raise ValueError(f"characters outside the vocabulary: {''.join(unknown)!r}; the vocabulary is {self.chars!r}")
        return [index[c] for c in text]

    def decode(self, ids):
        return self.bpe[1](ids, self.merges) if self.kind == "bpe" else "".join(self.chars[i] for i in ids)

    def saved(self):
        """What a checkpoint keeps: Tokenizer(**saved(), bpe=...) makes it again."""
        return {"kind": self.kind, "merges": self.merges, "chars": self.chars}


def tokenize(train_text, held_out_text, vocab_size=512, kind="bpe", folder=None, bpe=None):
    """Train a tokenizer on train_text alone, and encode both parts.

    kind "bpe": vocab_size - 256 merges, cached (cached_merges); kind "char": vocab_size is not used.
    bpe: (encode, decode) of notebook 09 (default: the course's).
    returns tokenizer, train_ids (n_train,), held_out_ids (n_held_out,): LongTensors
    """
    functions = {"bpe": bpe} if bpe else {}
    if kind == "bpe":
        tokenizer = Tokenizer("bpe", merges=cached_merges(train_text, vocab_size, folder), **functions)
    elif kind == "char":
        tokenizer = Tokenizer("char", chars="".join(sorted(set(train_text))))
    else:
        raise ValueError(f"kind must be 'bpe' or 'char', not {kind!r}")
    train_ids = torch.tensor(tokenizer.encode(train_text), dtype=torch.long)
    held_out_ids = torch.tensor(tokenizer.encode(held_out_text), dtype=torch.long)
    return tokenizer, train_ids, held_out_ids


def load_data(cfg, parts=None):
    """Tiny Shakespeare split 90 % / 10 % and tokenized by cfg's tokenizer:
    a dict of tokenizer, train (n,), held_out (m,) LongTensors, and held_out_chars."""
    train_text, held_out_text = split(shakespeare())
    bpe = (parts.encode, parts.decode) if parts else None
    tokenizer, train, held_out = tokenize(train_text, held_out_text, cfg.vocab_size, cfg.tokenizer, bpe=bpe)
    return {"tokenizer": tokenizer, "train": train, "held_out": held_out, "held_out_chars": len(held_out_text)}


# ---------------------------------------------------------------- held-out loss


def scored_windows(n, block_size, stride=None):
    """The windows that score each of the n - 1 targets of a stream of n tokens exactly once, with a long context.

    Target j (the token data[j], j = 1..n-1) is predicted from the tokens before it in its window. Windows of
    block_size inputs start every `stride` tokens (default block_size // 2), and the last one ends at the
    stream's end; each window scores only the targets no earlier window scored. So the first window's targets
    read from the stream's start (j tokens of context, all there are), and every later target reads at least
    block_size - stride + 1 tokens: at least half the block for a stride of at most half of it. stride = 1
    gives every target its full available context, min(j, block_size) tokens; stride = block_size cuts the
    stream into windows side by side, whose first targets read almost nothing.
    returns: a list of (start, first): the window's inputs are data[start : start + L], its targets
    data[start + 1 : start + L + 1], L = min(block_size, n - 1 - start); it scores its targets first..L-1.
    """
    stride = max(block_size // 2, 1) if stride is None else stride
    if not 1 <= stride <= block_size:
        raise ValueError(f"stride must lie in 1..block_size ({block_size}), not {stride}")
    if n < 2:
        raise ValueError(f"{n} tokens hold no target to predict")
    starts = list(range(0, n - 1 - block_size, stride)) + [max(0, n - 1 - block_size)]
    windows, scored = [], 0  # scored: the last target scored so far
    for start in starts:
        end = min(start + block_size, n - 1)  # the window's last target
        windows.append((start, scored - start))
        scored = end
    return windows


@torch.no_grad()
def token_losses(model, data, block_size, stride=None, batch_size=64):
    """-ln p(data[j] | the tokens before it in its window), for j = 1..n-1: each target scored once (scored_windows).

    data: (n,) LongTensor on any device; model(x) returns (logits, ...) for x (B, T <= block_size).
    Leaves the model in the mode it found.
    returns: (n - 1,) float64 tensor on the CPU, in the order of the targets
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    windows, n = scored_windows(len(data), block_size, stride), len(data)
    L = min(block_size, n - 1)  # every window's length
    starts = torch.tensor([start for start, _ in windows], device=device)
    index = starts[:, None] + torch.arange(L, device=device)  # (windows, L)
    data = data.to(device)
    losses = []
    for i in range(0, len(windows), batch_size):
        rows = index[i : i + batch_size]
        logits = model(data[rows])[0]
        per_token = F.cross_entropy(logits.flatten(0, 1).float(), data[rows + 1].flatten(), reduction="none")
        per_token = per_token.view(rows.shape).double().cpu()
        losses += [per_token[r, first:] for r, (_, first) in enumerate(windows[i : i + batch_size])]
    model.train(was_training)
    return torch.cat(losses)


def held_out_loss(model, data, block_size, stride=None, batch_size=64):
    """The model's mean cross-entropy over the whole token stream `data`, and how many tokens it predicted.

    Every token but the first is predicted once, with a long context: windows of block_size tokens every
    `stride` tokens (default block_size // 2), each scoring only its targets no earlier window scored
    (scored_windows, token_losses), so that every target after the first block reads at least
    block_size - stride + 1 tokens. This is the course's evaluation, for the command, the benchmarks and
    notebook 10. stride = block_size gives the older figure of windows side by side, whose first targets read
    almost nothing (for the CPU recipe's model after its 3200 steps, 0.012 to 0.014 nats per character higher; a
    stride of 16, at twice the cost, lowers the fair figure by another 0.002 to 0.003). Leaves the model in the
    mode it found.
    returns: (float nats per token, n - 1)
    """
    losses = token_losses(model, data, block_size, stride, batch_size)
    return losses.mean().item(), len(losses)


# ---------------------------------------------------------------- training


def build_model(cfg, V, parts, model_class=None):
    """The model cfg.model names, of cfg's size: parts.GPT, parts.ModernGPT, or a VariantGPT with cfg.model's changes
    (or model_class, with GPT's constructor); parts.build applies to parts.GPT and parts.ModernGPT only."""
    sizes = dict(d_model=cfg.d_model, h=cfg.h, d_ff=cfg.d_ff, N=cfg.N, block_size=cfg.block_size, dropout=cfg.dropout)
    if model_class is not None:
        return model_class(V, **sizes)
    if cfg.model == "gpt":
        return parts.build(parts.GPT(V, **sizes))
    if cfg.model == "modern":
        if parts.ModernGPT is None:
            raise Missing("this command has no ModernGPT (notebook 11) to train")
        return parts.build(parts.ModernGPT(V, **sizes))
    return modern.VariantGPT(V, **sizes, changes=[c for c in cfg.model.split("+") if c != "muon"])


def build_optimizer(model, cfg, split=modern.block_matrices):
    """AdamW (betas 0.9, 0.99, as nanoGPT), weight decay on the matrices and embeddings only; with cfg.muon,
    torch.optim.Muon on the parameters split(model) gives first (the blocks' matrices) and AdamW on the rest
    (modern.MuonAdamW: each group's lr_scale multiplies the schedule's rate).

    The fused AdamW updates every parameter in one kernel; where PyTorch lacks it,
    the multi-tensor version is used instead.
    """
    if cfg.muon:
        return modern.MuonAdamW(*split(model), lr=cfg.lr, muon_lr=cfg.muon_lr, weight_decay=cfg.weight_decay)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.99), fused=True)
    except RuntimeError:
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.99), foreach=True)


def learning_rate(step, progress, cfg):
    """Linear warm-up over cfg.warmup steps, then a cosine from cfg.lr to cfg.min_lr as progress goes 0 -> 1."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))


def save_checkpoint(path, model, optimizer, step, cfg, history, tokenizer):
    """Model, optimizer, step, config, history, and the tokenizer, which sampling needs."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "config": asdict(cfg),
                "history": history, "tokenizer": tokenizer.saved()}, path)


def fit(cfg, parts, checkpoint=None, resume=None, progress=True, log=print, compile=None, start=None, data=None,
        model_class=None):
    """Train parts.GPT on Tiny Shakespeare for cfg.max_steps, or until cfg.max_seconds after `start`.

    The budget of seconds counts from `start` (default: when the first step begins; the command
    passes its own start), held-out evaluations excluded: evaluating more often takes no training
    from a run.
    compile: torch.compile the model (default: no; on an H200 it saves 3 ms of a 15.5 ms step, and its
    first step takes 17 s: it pays off only for runs of minutes). data: load_data(cfg, parts)'s dict, if loaded.
    model_class: train this class (GPT's constructor and forward) instead. log: where process 0
    reports each evaluation when progress bars are off.
    history: lists of step, loss (mean training loss since the last evaluation, nats per token),
    held_out (nats per character, held_out_loss's fair evaluation) and seconds (training time, evaluations excluded).
    returns a dict: model, tokenizer, history, held_out (the last evaluation's nats per character),
    steps, seconds (since start), trained_seconds (evaluations excluded), tokens_per_second, device, rank, world
    """
    rank, world = distributed()
    dev = process_device(rank)
    torch.manual_seed(cfg.seed)
    data = data or load_data(cfg, parts)
    model = build_model(cfg, data["tokenizer"].V, parts, model_class).to(dev)
    optimizer = build_optimizer(model, cfg, parts.split_parameters)
    step, history = 0, {"step": [], "loss": [], "held_out": [], "seconds": []}
    if resume:
        step, history = load_checkpoint(resume, model, optimizer, map_location=dev)
    trained = model
    if compile:
        trained = torch.compile(model)
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(trained, device_ids=[dev.index] if dev.type == "cuda" else None)
    autocast, scaler = precision(dev, cpu=True, enabled=cfg.bf16)  # a GPU's, and a CPU's with bfloat16 matrix units
    if dev.type == "cuda":
        torch.set_float32_matmul_precision("high")
    train = data["train"].to(dev)
    sampler = torch.Generator().manual_seed(cfg.seed * 1000 + rank + step)
    per_rank = max(1, cfg.batch_size // world)
    show = progress and rank == 0
    bar = tqdm(total=100, unit="%", desc=f"gpt ({dev.type}, {world} process(es))", disable=not show)
    first_step, losses = step, RunningLoss()
    clock = _Clock(start, offset=history["seconds"][-1] if history["seconds"] else 0.0)

    def evaluate_and_record():  # process 0 alone; its time is not training time
        with clock.paused(), autocast():
            score = parts.nats_per_char(*held_out_loss(model, data["held_out"], cfg.block_size), data["held_out_chars"])
        _record(history, step, losses, float(score), clock.trained())
        bar.set_postfix(step=step, held_out=f"{score:.3f}")
        if not show:
            log(f"step {step}: loss {history['loss'][-1]:.3f} nats per token, held-out {score:.3f} nats per character, "
                f"{history['seconds'][-1]:.0f} s of training")

    while (done := _progress(cfg, step, clock.budget(), dev)) < 1.0:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, done, cfg) * group.get("lr_scale", 1.0)
        x, y = parts.get_batch(train, cfg.block_size, per_rank, generator=sampler)
        with autocast():
            _, loss = trained(x, y)
        optimizer_step(loss, model, optimizer, scaler, cfg.clip)
        step += 1
        losses.add(loss)
        bar.update(int(100 * done) - bar.n)
        if rank == 0 and cfg.eval_every and step % cfg.eval_every == 0:
            evaluate_and_record()
        elif step % 50 == 0:
            bar.set_postfix(step=step, loss=f"{loss.item():.3f}")
    bar.update(100 - bar.n)
    bar.close()
    if rank == 0:
        if not history["step"] or history["step"][-1] != step:
            evaluate_and_record()
        if checkpoint:
            save_checkpoint(checkpoint, model, optimizer, step, cfg, history, data["tokenizer"])
    if world > 1:
        dist.barrier()
    tokens = (step - first_step) * per_rank * world * cfg.block_size
    return {"model": model, "tokenizer": data["tokenizer"], "history": history,
            "held_out": history["held_out"][-1] if history["held_out"] else float("nan"), "steps": step,
            "seconds": time.perf_counter() - clock.start, "trained_seconds": clock.trained(),
            "tokens_per_second": tokens / max(clock.trained() - clock.offset, 1e-9),
            "device": dev, "rank": rank, "world": world}


class _Clock:
    """Seconds since start (default: now), less the time spent inside paused() (the held-out evaluations)."""

    def __init__(self, start=None, offset=0.0):
        self.began, self.offset, self.excluded = time.perf_counter(), offset, 0.0
        self.start = self.began if start is None else start

    def budget(self):
        """Seconds since start, evaluations excluded: what max_seconds bounds."""
        return time.perf_counter() - self.start - self.excluded

    def trained(self):
        """Seconds of training since fit began, evaluations excluded, plus the resumed run's."""
        return self.offset + time.perf_counter() - self.began - self.excluded

    @contextlib.contextmanager
    def paused(self):
        began = time.perf_counter()
        try:
            yield
        finally:
            self.excluded += time.perf_counter() - began


def _progress(cfg, step, elapsed, dev):
    """How far training is, 0 -> 1: step against max_steps, or elapsed against max_seconds, the larger.
    Under torchrun process 0's count holds for all, so that every process stops at the same step."""
    done = step / cfg.max_steps
    if cfg.max_seconds:
        done = max(done, elapsed / cfg.max_seconds)
    if dist.is_initialized():
        shared = torch.tensor([done], device=dev if dev.type == "cuda" else "cpu")
        dist.broadcast(shared, 0)
        done = float(shared[0])
    return done


def _record(history, step, losses, score, seconds):
    history["step"].append(step)
    history["loss"].append(losses.read())
    history["held_out"].append(score)
    history["seconds"].append(seconds)


# ---------------------------------------------------------------- sampling


def read_checkpoint(path, prog, map_location="cpu"):
    """The dict that save_checkpoint wrote; ValueError for a file it did not write."""
    try:
        state = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # a file of anything: torch.load raises many kinds
        raise ValueError(f"{path} cannot be read as a checkpoint ({type(e).__name__}): train one with {prog} train") from None
    if not isinstance(state, dict) or "tokenizer" not in state or not set(state["config"]) <= {f.name for f in fields(Config)}:
        raise ValueError(f"{path} is not a checkpoint of {prog} train")
    return state


def load_for_sampling(path, dev, parts):
    """(model in eval mode, tokenizer) from a checkpoint that fit saved."""
    state = read_checkpoint(path, parts.prog, dev)
    cfg, tokenizer = Config(**state["config"]), Tokenizer(**state["tokenizer"], bpe=(parts.encode, parts.decode))
    try:
        model = build_model(cfg, tokenizer.V, parts).to(dev)
    except Missing as e:
        raise ValueError(f"{path} holds a {cfg.model} model: {e}") from None
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise ValueError(f"{path} holds weights of another model than this GPT: {str(e).splitlines()[0]}") from None
    return model.eval(), tokenizer


# ---------------------------------------------------------------- the command


def arguments(argv, prog, checkpoint=os.path.join("checkpoints", "gpt.pt")):
    """(the subcommand's parser, the parsed arguments) of `prog train | sample`."""
    parser = argparse.ArgumentParser(prog=prog, description="Train a GPT on Tiny Shakespeare, or sample from one.")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train on Tiny Shakespeare; prints the held-out nats per character last")
    for f in fields(Config):
        choices = ["bpe", "char"] if f.name == "tokenizer" else None
        kind = {"action": argparse.BooleanOptionalAction} if f.type is bool else {"type": type(f.default), "choices": choices}
        train.add_argument("--" + f.name.replace("_", "-"), default=None, **kind,
                           help=f"default: the device's recipe (notebook 11's: CPU {getattr(MODERN_CPU, f.name)}, GPU "
                                f"{getattr(MODERN_GPU, f.name)}; notebook 10's: CPU {getattr(CPU, f.name)}, GPU {getattr(GPU, f.name)})")
    train.add_argument("--checkpoint", default=checkpoint, help="where to save")
    train.add_argument("--resume", default=None, help="a checkpoint to continue from, with its config; only "
                       "--max-steps (counted from step 0), --max-seconds and --eval-every may change")
    train.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                       help="torch.compile the model (default: no; it pays off on runs of minutes, not of 45 s)")
    train.add_argument("--no-progress", action="store_true")
    sample = commands.add_parser("sample", help="continue a prompt with a trained model")
    sample.add_argument("--prompt", default="\n")
    sample.add_argument("--checkpoint", default=checkpoint)
    sample.add_argument("--tokens", type=int, default=200, help="how many tokens to add")
    sample.add_argument("--temperature", type=float, default=1.0)
    sample.add_argument("--top-k", type=int, default=None)
    sample.add_argument("--top-p", type=float, default=None)
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--no-cache", action="store_true", help="recompute the whole window at every step")
    sample.add_argument("--beam", type=int, default=None, metavar="K",
                        help="search with a beam of K hypotheses (beam_generate) instead of sampling: the likeliest "
                             "continuation it finds, and its log-probability")
    args = parser.parse_args(argv)
    command = {"train": train, "sample": sample}[args.command]
    path = args.resume if args.command == "train" else args.checkpoint
    if path and not os.path.isfile(path):
        command.error(f"no checkpoint at {path}" + (f": train one first ({prog} train)" if args.command == "sample" else ""))
    return command, args


def train_command(parser, args, parts, start):
    given = {f.name: getattr(args, f.name) for f in fields(Config) if getattr(args, f.name) is not None}
    rank, _ = distributed()
    dev = process_device(rank)
    modern = getattr(parts, "ModernGPT", None) is not None and given.get("model", "modern") != "gpt"  # --model gpt: 10's recipe
    cfg = replace(recipe(dev, modern=modern), **given)
    if args.resume:
        try:
            saved = read_checkpoint(args.resume, parts.prog)["config"]
        except ValueError as error:
            parser.error(str(error))
        cfg = Config(**(saved | {k: v for k, v in given.items() if k in ("max_steps", "max_seconds", "eval_every")}))
    try:
        check_config(cfg)
    except ValueError as error:
        parser.error(str(error))
    if rank == 0:  # the run's first line: the precision it trains in, and why
        print(f"training on {dev} {describe_precision(dev, cpu=True, enabled=cfg.bf16)}", flush=True)
    result = fit(cfg, parts, checkpoint=args.checkpoint, resume=args.resume, progress=not args.no_progress,
                 compile=args.compile, start=start)
    if result["rank"] == 0:
        print(f"device {result['device']}, {result['world']} process(es): {result['steps']} steps, "
              f"{result['tokens_per_second']:.0f} tokens/s; tokenizer {cfg.tokenizer}, V = {result['tokenizer'].V}; "
              f"checkpoint {args.checkpoint}")
        stride = max(cfg.block_size // 2, 1)  # held_out_loss's
        print(f"held-out: every token of the held-out text scored once, each after the first {cfg.block_size} with at least "
              f"{cfg.block_size - stride + 1} tokens of context (windows of {cfg.block_size} every {stride} tokens)")
        print(f"held-out {result['held_out']:.3f} nats per character after {result['trained_seconds']:.0f} s of training, "
              f"{time.perf_counter() - start:.0f} s from the command's start")
    if dist.is_initialized():
        dist.destroy_process_group()


def sample_command(parser, args, parts):
    dev = process_device(0)
    try:
        model, tokenizer = load_for_sampling(args.checkpoint, dev, parts)
        prompt = tokenizer.encode(args.prompt)
        course_gpt.check_sampling(args.temperature, args.top_k, args.top_p)
    except ValueError as error:
        parser.error(str(error))
    if not prompt:
        parser.error("the prompt is empty: give at least one character")
    if args.tokens < 0:
        parser.error(f"--tokens must be >= 0, not {args.tokens}")
    cached = not args.no_cache and not isinstance(model, modern.VariantGPT)  # a VariantGPT has no KV cache
    if args.beam is not None:
        if isinstance(model, modern.VariantGPT):
            parser.error(f"{args.checkpoint} holds a VariantGPT, which has no KV cache: beam search needs one")
        return _beam_search(parser, args, parts, model, tokenizer, torch.tensor([prompt], device=dev))
    generator = torch.Generator(dev).manual_seed(args.seed)
    ids = parts.generate(model, torch.tensor([prompt], device=dev), args.tokens, use_cache=cached,
                         temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, generator=generator)
    print(tokenizer.decode(ids[0].tolist()))


def _beam_search(parser, args, parts, model, tokenizer, idx):
    """`sample --beam K`: the text on stdout, its log-probability under the model on stderr."""
    if args.beam < 1:
        parser.error(f"--beam must be at least 1, not {args.beam}")
    if (args.temperature, args.top_k, args.top_p, args.no_cache) != (1.0, None, None, False):
        parser.error("--beam searches for the likeliest continuation, and --temperature, --top-k, --top-p and "
                     "--no-cache shape a draw: give one or the other")
    try:
        ids, score = parts.beam_generate(model, idx, args.tokens, args.beam)
    except Missing as e:
        parser.error(str(e))
    print(tokenizer.decode(ids[0].tolist()))
    per_token = f", {score / args.tokens:.3f} per token" if args.tokens else ""
    print(f"a beam of {args.beam}: log-probability {score:.2f} over {args.tokens} tokens{per_token}", file=sys.stderr)


def main(parts, argv=None, start=None, prog=None):
    """`prog train | sample` (prog: parts.prog); start: the command's start (perf_counter), from which its budget
    counts. parts: a Parts, or a function (subcommand, parser) -> Parts, called once the arguments are read."""
    start = time.perf_counter() if start is None else start
    parser, args = arguments(argv, prog or parts.prog)
    if not isinstance(parts, Parts):
        parts = parts(args.command, parser)
    if args.command == "train":
        train_command(parser, args, parts, start)
    else:
        sample_command(parser, args, parts)
