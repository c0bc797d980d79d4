"""The notebook 08 recipe as a command: train a Transformer on dates (or copy / reverse).

    python -m solutions_lib.train                      # dates, until 99% exact match on held-out dates
    python -m solutions_lib.train --task reverse --d-model 64
    python -m solutions_lib.train --resume checkpoints/dates.pt
    torchrun --standalone --nproc_per_node=2 -m solutions_lib.train --max-steps 50

Device: CUDA, then Apple MPS, then CPU. On a GPU the forward pass runs under
autocast (bfloat16 on GPUs of compute capability 8.0 or later, else float16 with a
gradient scaler; the run's first line says which), and
attention uses PyTorch's fused kernel. Under torchrun every process trains on
its own share of each batch and DistributedDataParallel averages the
gradients (NCCL on GPUs, gloo on CPUs); process 0 evaluates, prints and saves.

The held-out scores are those of an exponential moving average of the weights
(Config.ema): late in training each step moves the weights back and forth
around a minimum, and their average sits closer to it. On 2 CPU cores the
dates reach 99 % in 300 to 350 steps with it, 550 to 600 without (seeds 0 to 2).
"""
import argparse
import copy
import math
import os
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch import nn
from tqdm.auto import tqdm

from course_lib.dates import date_splits, date_vocab
from course_lib.tasks import copy_pairs, encode_pairs, letters_vocab, reverse_pairs
from course_lib.training import (describe_precision, distributed, load_checkpoint, RunningLoss, optimizer_step, precision,
                                 process_device)
from course_lib.transformer import init_embeddings
from solutions_lib import START
from solutions_lib.training import label_smoothed_cross_entropy, make_masks, shift_right, warmup_lr
from solutions_lib.fast import fuse
from solutions_lib.transformer import Transformer, sinusoidal_encoding


@dataclass
class Config:
    task: str = "dates"  # dates, copy or reverse
    n_train: int = 20000
    n_test: int = 1000
    d_model: int = 64
    h: int = 4
    N: int = 2
    d_ff: int = 256
    dropout: float = 0.0
    batch_size: int = 128
    warmup: int = 100
    lr_factor: float = 0.5  # the learning rate is lr_factor * warmup_lr(step, d_model, warmup)
    smoothing: float = 0.1
    clip: float = 1.0
    max_steps: int = 4000
    eval_every: int = 50
    target: float = 0.99  # stop once the held-out exact match reaches this
    ema: float = 0.97  # evaluate and return the weights' moving average, ema * average + (1 - ema) * weights (0: none)
    seed: int = 0
    arch: str = "ours"  # ours (solutions_lib.transformer) or torch (nn.Transformer)


# ---------------------------------------------------------------- data and model


def task_data(cfg):
    """(vocab, (src, tgt) for training, (src, tgt) held out) for the configured task."""
    if cfg.task == "dates":
        vocab = date_vocab()
        train, test = date_splits(cfg.n_train, cfg.n_test, seed=cfg.seed)
    else:
        make = {"copy": copy_pairs, "reverse": reverse_pairs}[cfg.task]
        vocab = letters_vocab()
        train, test = make(cfg.n_train, seed=cfg.seed), make(cfg.n_test, seed=cfg.seed + 10_000)
    return vocab, encode_pairs(train, vocab), encode_pairs(test, vocab)


class TorchTransformer(nn.Module):
    """The same model around PyTorch's nn.Transformer, for the benchmarks.

    Same embeddings (scaled by sqrt(d_model)), sinusoidal positions and output
    projection; forward and decode take the course's masks (True = allowed).
    nn.Transformer wants the opposite: True = hidden, so the masks are inverted here.
    """

    def __init__(self, src_vocab, tgt_vocab, *, d_model=512, h=8, d_ff=2048, N=6, dropout=0.1, max_len=512):
        super().__init__()
        self.d_model = d_model
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.transformer = nn.Transformer(d_model, h, N, N, d_ff, dropout, batch_first=True)
        self.out = nn.Linear(d_model, tgt_vocab)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    def embed(self, embedding, tokens):
        return embedding(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)]

    def encode(self, src, src_mask=None):
        pad = None if src_mask is None else ~src_mask[:, 0]
        return self.transformer.encoder(self.embed(self.src_embed, src), src_key_padding_mask=pad)

    def decode(self, memory, tgt, src_mask=None, tgt_mask=None):
        T = tgt.size(1)
        future = torch.ones(T, T, dtype=torch.bool, device=tgt.device).triu(1)
        pad = None if src_mask is None else ~src_mask[:, 0]
        tgt_pad = None if tgt_mask is None else ~tgt_mask[:, -1]
        x = self.transformer.decoder(self.embed(self.tgt_embed, tgt), memory, tgt_mask=future,
                                     tgt_is_causal=True, tgt_key_padding_mask=tgt_pad,
                                     memory_key_padding_mask=pad)
        return self.out(x)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.decode(self.encode(src, src_mask), tgt, src_mask, tgt_mask)


def build_model(cfg, vocab, max_len=64, kind=None):
    """The model of cfg.arch, or of `kind`: a class with the course's Transformer interface, say a learner's."""
    kind = kind or {"ours": Transformer, "torch": TorchTransformer}[cfg.arch]
    model = kind(len(vocab), len(vocab), d_model=cfg.d_model, h=cfg.h, d_ff=cfg.d_ff, N=cfg.N,
                 dropout=cfg.dropout, max_len=max_len)
    return init_embeddings(fuse(model) if kind is Transformer else model)


def build_optimizer(model, cfg):
    """AdamW with the paper's betas, and the warm-up schedule as a LambdaLR.

    The fused AdamW updates every parameter in one kernel; PyTorch before 2.4 has
    it on CUDA only, and there the multi-tensor version is used instead.
    """
    settings = dict(lr=cfg.lr_factor, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01)
    try:
        optimizer = torch.optim.AdamW(model.parameters(), fused=True, **settings)
    except RuntimeError:
        optimizer = torch.optim.AdamW(model.parameters(), foreach=True, **settings)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_lr(step, cfg.d_model, cfg.warmup))
    return optimizer, scheduler


def trim(ids, pad_id=0):
    """Drop the columns that are padding in every row: (B, T) -> (B, T')."""
    return ids[:, : int((ids != pad_id).any(0).nonzero().max()) + 1]


# ---------------------------------------------------------------- training


@torch.inference_mode()
def evaluate(model, src, tgt, batch_size=1000, pad_id=0, bos_id=1):
    """Exact match of greedy decoding on held-out pairs: float in [0, 1].

    Greedy decoding writes a target exactly when, fed the target's own prefix, the model's most
    likely next token is the target's at every position up to <eos>. So one teacher-forced pass
    gives the score that greedy_decode and exact_match would, without decoding token by token.
    """
    model.eval()
    hits = 0
    for i in range(0, len(src), batch_size):
        s, t = trim(src[i : i + batch_size], pad_id), trim(tgt[i : i + batch_size], pad_id)
        tgt_in = shift_right(t, bos_id)
        logits = model(s, tgt_in, *make_masks(s, tgt_in, pad_id))
        right = (logits.argmax(-1) == t) | (t == pad_id)  # after <eos> comes padding only
        hits += int(right.all(-1).sum())
    return hits / len(src)


def save_checkpoint(path, model, optimizer, scheduler, step, cfg, history, ema=None):
    """model: the trained weights, to resume from; ema: their moving average, the model that was evaluated."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "ema": None if ema is None else ema.state_dict(), "step": step, "config": asdict(cfg),
                "history": history}, path)


def moving_average(model, decay):
    """A copy of model whose weights follow model's as average <- decay * average + (1 - decay) * weights
    (update_average); without gradients of its own."""
    return copy.deepcopy(model).requires_grad_(False) if decay else None


@torch.no_grad()
def update_average(average, model, decay):
    for a, w in zip(average.parameters(), model.parameters()):
        a.lerp_(w, 1 - decay)


def fit(cfg, checkpoint=None, resume=None, progress=True, log=print, max_seconds=None, model_class=None):
    """Train with the recipe of notebook 08 until the held-out exact match reaches cfg.target.

    model_class: train this Transformer class (a learner's, say) instead of cfg.arch's

    returns a dict: model (the moving average of the weights, when cfg.ema), vocab,
    history (lists of step, loss, exact_match, seconds), seconds,
    reached (bool), tokens_per_second
    """
    rank, world = distributed()
    dev = process_device(rank)
    torch.manual_seed(cfg.seed)
    vocab, (src, tgt), (test_src, test_tgt) = task_data(cfg)
    model = build_model(cfg, vocab, max_len=max(src.size(1), tgt.size(1), 64), kind=model_class).to(dev)
    optimizer, scheduler = build_optimizer(model, cfg)
    step, history = 0, {"step": [], "loss": [], "exact_match": [], "seconds": []}
    average = moving_average(model, cfg.ema)
    if resume:
        step, history = load_checkpoint(resume, model, optimizer, scheduler, map_location=dev, ema=average)
    evaluated = average if average is not None else model
    trained = model
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    autocast, scaler = precision(dev)
    sampler = torch.Generator().manual_seed(cfg.seed * 1000 + rank + step)
    per_rank = max(1, cfg.batch_size // world)
    show = progress and rank == 0
    bar = tqdm(total=cfg.max_steps, initial=step, desc=f"{cfg.task} ({cfg.arch}, {dev.type})", disable=not show)
    start, tokens, losses, reached = time.perf_counter(), 0, RunningLoss(), False
    while step < cfg.max_steps and not reached:
        idx = torch.randint(len(src), (per_rank,), generator=sampler)
        s, t = trim(src[idx]), trim(tgt[idx])
        tokens += int((t != vocab.pad_id).sum()) * world  # counted on the host: no wait for the GPU
        s, t = s.to(dev), t.to(dev)
        trained.train()
        tgt_in = shift_right(t, vocab.bos_id)
        src_mask, tgt_mask = make_masks(s, tgt_in, vocab.pad_id)
        with autocast():
            logits = trained(s, tgt_in, src_mask, tgt_mask)
        loss = label_smoothed_cross_entropy(logits.float(), t, cfg.smoothing, vocab.pad_id)
        optimizer_step(loss, model, optimizer, scaler, cfg.clip)
        scheduler.step()
        if average is not None:
            update_average(average, model, cfg.ema)
        step += 1
        losses.add(loss)
        bar.update(1)
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            reached = _evaluate_and_log(evaluated, test_src, test_tgt, vocab, cfg, step, losses, history, start, rank, dev,
                                        bar)
            if rank == 0 and not show:
                log(f"step {step}: loss {history['loss'][-1]:.3f}, exact match {history['exact_match'][-1]:.4f}, "
                    f"{history['seconds'][-1]:.0f} s")
            if checkpoint and rank == 0:
                save_checkpoint(checkpoint, model, optimizer, scheduler, step, cfg, history, average)
        if max_seconds is not None and time.perf_counter() - start > max_seconds:
            break
    bar.close()
    seconds = time.perf_counter() - start
    if world > 1:
        dist.barrier()
    return {"model": evaluated, "vocab": vocab, "history": history, "seconds": seconds, "reached": reached,
            "steps": step, "tokens_per_second": tokens / max(seconds, 1e-9), "device": dev, "rank": rank, "world": world}


def _evaluate_and_log(model, test_src, test_tgt, vocab, cfg, step, losses, history, start, rank, dev, bar):
    score = torch.zeros(1, device=dev)
    if rank == 0:
        score[0] = evaluate(model, test_src.to(dev), test_tgt.to(dev), pad_id=vocab.pad_id, bos_id=vocab.bos_id)
    if dist.is_initialized():
        dist.broadcast(score, 0)  # every process stops at the same step
    em = float(score[0])
    history["step"].append(step)
    history["loss"].append(losses.read())
    history["exact_match"].append(em)
    history["seconds"].append(time.perf_counter() - start)
    bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", exact_match=f"{em:.3f}")
    return em >= cfg.target


def main(argv=None):
    parser = argparse.ArgumentParser(description="Train the notebook 08 Transformer (dates to ISO, or copy / reverse).")
    defaults = Config()
    for name, value in asdict(defaults).items():
        flag = "--" + name.replace("_", "-")
        kind = type(value)
        choices = {"task": ["dates", "copy", "reverse"], "arch": ["ours", "torch"]}.get(name)
        parser.add_argument(flag, type=kind, default=value, choices=choices)
    parser.add_argument("--checkpoint", default=None, help="where to save (default checkpoints/<task>.pt)")
    parser.add_argument("--resume", default=None, help="a checkpoint to continue from")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    cfg = Config(**{k: getattr(args, k) for k in asdict(defaults)})
    if args.resume:
        saved = torch.load(args.resume, map_location="cpu", weights_only=False)["config"]
        cfg = Config(**(saved | {"max_steps": cfg.max_steps, "target": cfg.target}))
    checkpoint = args.checkpoint or os.path.join("checkpoints", f"{cfg.task}.pt")
    rank, _ = distributed()
    dev = process_device(rank)
    if rank == 0:  # the run's first line: the precision it trains in, and why
        print(f"training on {dev} {describe_precision(dev)}", flush=True)
    result = fit(cfg, checkpoint=checkpoint, resume=args.resume, progress=not args.no_progress)
    if result["rank"] == 0:
        h = result["history"]
        em = h["exact_match"][-1] if h["exact_match"] else float("nan")
        print(f"device {result['device']}, {result['world']} process(es): {result['steps']} steps in {result['seconds']:.1f} s "
              f"of training, {time.perf_counter() - START:.1f} s from the command's start, "
              f"{result['tokens_per_second']:.0f} target tokens/s")
        print(f"held-out exact match {em:.4f} ({'reached' if result['reached'] else 'did not reach'} {cfg.target}); checkpoint {checkpoint}")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
