"""`python -m solutions_lib.gpt train | sample`: notebook 10's recipe as a command (see solutions_lib.gpt)."""
import argparse
import contextlib
import math
import os
import time
from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.distributed as dist
from torch import nn
from tqdm.auto import tqdm

from course_lib.text import shakespeare, split
from solutions_lib import START, bpe
from solutions_lib.fast import fuse
from solutions_lib.gpt import GPT, check_sampling, generate
from solutions_lib.gpt.data import Tokenizer, evaluate, get_batch, tokenize
from solutions_lib.train import distributed, load_checkpoint, mean_loss, optimizer_step, precision, process_device


# ---------------------------------------------------------------- the command: recipes


@dataclass
class Config:
    tokenizer: str = "bpe"  # bpe (notebook 09's, trained on the training part) or char
    vocab_size: int = 512  # bpe: 256 bytes + vocab_size - 256 merges
    d_model: int = 128  # sizes in the course's order: d_model, h, d_ff, N
    h: int = 4
    d_ff: int = 512
    N: int = 4
    block_size: int = 64
    dropout: float = 0.0
    batch_size: int = 16
    lr: float = 2e-3  # peak learning rate, after `warmup` steps; then a cosine down to min_lr
    min_lr: float = 2e-4
    warmup: int = 50
    weight_decay: float = 0.1
    clip: float = 1.0
    max_steps: int = 1_000_000
    max_seconds: float = 71.0  # training stops this many seconds after the command's start, evaluations not counted (0: none)
    eval_every: int = 0  # evaluate on the held-out text every this many steps (0: at the end only)
    seed: int = 0


CPU = Config()  # 2 cores: 0.87 M parameters with V = 512
# nanoGPT's shakespeare-char model (10.8 M parameters) on BPE-384 tokens. On an H200, with the same steps,
# V = 384 reached 1.470 nats per character, V = 512 1.482 (its fewer tokens are seen more often: it overfits sooner)
GPU = Config(vocab_size=384, d_model=384, h=6, N=6, d_ff=1536, block_size=256, batch_size=64, dropout=0.2, lr=1e-3,
             min_lr=1e-4, warmup=100, max_seconds=44.0)


def check_config(cfg):
    """Raise ValueError for a Config that cannot train."""
    if cfg.tokenizer not in ("bpe", "char"):
        raise ValueError(f"tokenizer must be 'bpe' or 'char', not {cfg.tokenizer!r}")
    if cfg.tokenizer == "bpe" and cfg.vocab_size < bpe.N_BYTES:
        raise ValueError(f"a BPE vocabulary holds the {bpe.N_BYTES} bytes at least, not vocab_size {cfg.vocab_size}")
    if cfg.d_model % cfg.h:
        raise ValueError(f"d_model ({cfg.d_model}) must be a multiple of h ({cfg.h})")
    for name in ("d_model", "h", "N", "d_ff", "block_size", "batch_size", "max_steps"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be at least 1, not {getattr(cfg, name)}")
    if not 0 <= cfg.dropout < 1 or cfg.max_seconds < 0 or cfg.eval_every < 0:
        raise ValueError("dropout must lie in [0, 1), max_seconds and eval_every must be >= 0")


def recipe(dev):
    """The Config the command runs with no flags on device dev."""
    return GPU if dev.type == "cuda" else CPU


def load_data(cfg):
    """Tiny Shakespeare split 90 % / 10 % and tokenized by cfg's tokenizer:
    a dict of tokenizer, train (n,), held_out (m,) LongTensors, and held_out_chars."""
    train_text, held_out_text = split(shakespeare())
    tokenizer, train, held_out = tokenize(train_text, held_out_text, cfg.vocab_size, cfg.tokenizer)
    return {"tokenizer": tokenizer, "train": train, "held_out": held_out, "held_out_chars": len(held_out_text)}


def build_model(cfg, V, model_class=None):
    """GPT (or model_class, with its constructor) of cfg's size; the course's GPT with fused kernels."""
    kind = model_class or GPT
    model = kind(V, d_model=cfg.d_model, h=cfg.h, d_ff=cfg.d_ff, N=cfg.N, block_size=cfg.block_size, dropout=cfg.dropout)
    return fuse(model) if kind is GPT else model


def build_optimizer(model, cfg):
    """AdamW (betas 0.9, 0.99, as nanoGPT), weight decay on the matrices and embeddings only.

    The fused AdamW updates every parameter in one kernel; where PyTorch lacks it,
    the multi-tensor version is used instead.
    """
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


# ---------------------------------------------------------------- the command: training


def save_checkpoint(path, model, optimizer, step, cfg, history, tokenizer):
    """Model, optimizer, step, config, history, and the tokenizer, which sampling needs."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "config": asdict(cfg),
                "history": history, "tokenizer": asdict(tokenizer)}, path)


def fit(cfg, checkpoint=None, resume=None, progress=True, log=print, compile=None, start=None, data=None,
        model_class=None):
    """Train GPT on Tiny Shakespeare for cfg.max_steps, or until cfg.max_seconds after `start`.

    The budget of seconds counts from `start` (default: when the first step begins; the command
    passes its own start), held-out evaluations excluded: evaluating more often takes no training
    from a run.
    compile: torch.compile the model (default: no; on an H200 it saves 3 ms of a 15.5 ms step, and its
    first step takes 17 s: it pays off only for runs of minutes). data: load_data(cfg)'s dict, if loaded.
    model_class: train this class (GPT's constructor and forward) instead. log: where process 0
    reports each evaluation when progress bars are off.
    history: lists of step, loss (mean training loss since the last evaluation, nats per token),
    held_out (nats per character) and seconds (training time, evaluations excluded).
    returns a dict: model, tokenizer, history, held_out (the last evaluation's nats per character),
    steps, seconds (since start), tokens_per_second, device, rank, world
    """
    rank, world = distributed()
    dev = process_device(rank)
    torch.manual_seed(cfg.seed)
    data = data or load_data(cfg)
    model = build_model(cfg, data["tokenizer"].V, model_class).to(dev)
    optimizer = build_optimizer(model, cfg)
    step, history = 0, {"step": [], "loss": [], "held_out": [], "seconds": []}
    if resume:
        step, history = load_checkpoint(resume, model, optimizer, map_location=dev)
    trained = model
    if compile:
        trained = torch.compile(model)
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(trained, device_ids=[dev.index] if dev.type == "cuda" else None)
    autocast, scaler = precision(dev)
    if dev.type == "cuda":
        torch.set_float32_matmul_precision("high")
    train = data["train"].to(dev)
    sampler = torch.Generator().manual_seed(cfg.seed * 1000 + rank + step)
    per_rank = max(1, cfg.batch_size // world)
    show = progress and rank == 0
    bar = tqdm(total=100, unit="%", desc=f"gpt ({dev.type}, {world} process(es))", disable=not show)
    first_step, losses = step, []
    clock = _Clock(start, offset=history["seconds"][-1] if history["seconds"] else 0.0)

    def evaluate_and_record():  # process 0 alone; its time is not training time
        with clock.paused(), autocast():
            score = evaluate(model, data["held_out"], cfg.block_size, data["held_out_chars"])
        _record(history, step, losses, score, clock.trained())
        bar.set_postfix(step=step, held_out=f"{score:.3f}")
        if not show:
            log(f"step {step}: loss {history['loss'][-1]:.3f} nats per token, held-out {score:.3f} nats per character, "
                f"{history['seconds'][-1]:.0f} s of training")

    while (done := _progress(cfg, step, clock.budget(), dev)) < 1.0:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, done, cfg)
        x, y = get_batch(train, cfg.block_size, per_rank, generator=sampler)
        with autocast():
            _, loss = trained(x, y)
        optimizer_step(loss, model, optimizer, scaler, cfg.clip)
        step += 1
        losses.append(loss.detach())
        bar.update(int(100 * done) - bar.n)
        if rank == 0 and cfg.eval_every and step % cfg.eval_every == 0:
            evaluate_and_record()
            losses = []
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
            "seconds": time.perf_counter() - clock.start, "tokens_per_second": tokens / max(clock.trained() - clock.offset, 1e-9),
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
    history["loss"].append(mean_loss(losses))
    history["held_out"].append(score)
    history["seconds"].append(seconds)


# ---------------------------------------------------------------- the command: sampling


def read_checkpoint(path, map_location="cpu"):
    """The dict that save_checkpoint wrote; ValueError for a file it did not write."""
    state = torch.load(path, map_location=map_location, weights_only=False)
    if not isinstance(state, dict) or "tokenizer" not in state or set(state["config"]) != {f.name for f in fields(Config)}:
        raise ValueError(f"{path} is not a checkpoint of python -m solutions_lib.gpt train")
    return state


def load_for_sampling(path, dev):
    """(model in eval mode, tokenizer) from a checkpoint that fit saved."""
    state = read_checkpoint(path, dev)
    cfg, tokenizer = Config(**state["config"]), Tokenizer(**state["tokenizer"])
    model = build_model(cfg, tokenizer.V).to(dev)
    model.load_state_dict(state["model"])
    return model.eval(), tokenizer


def _arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m solutions_lib.gpt", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train on Tiny Shakespeare; prints the held-out nats per character last")
    for f in fields(Config):
        choices = ["bpe", "char"] if f.name == "tokenizer" else None
        train.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None, choices=choices,
                           help=f"default: the device's recipe (CPU {getattr(CPU, f.name)}, GPU {getattr(GPU, f.name)})")
    train.add_argument("--checkpoint", default=os.path.join("checkpoints", "gpt.pt"), help="where to save")
    train.add_argument("--resume", default=None, help="a checkpoint to continue from, with its config; only "
                       "--max-steps (counted from step 0), --max-seconds and --eval-every may change")
    train.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                       help="torch.compile the model (default: no; it pays off on runs of minutes, not of 45 s)")
    train.add_argument("--no-progress", action="store_true")
    sample = commands.add_parser("sample", help="continue a prompt with a trained model")
    sample.add_argument("--prompt", default="\n")
    sample.add_argument("--checkpoint", default=os.path.join("checkpoints", "gpt.pt"))
    sample.add_argument("--tokens", type=int, default=200, help="how many tokens to add")
    sample.add_argument("--temperature", type=float, default=1.0)
    sample.add_argument("--top-k", type=int, default=None)
    sample.add_argument("--top-p", type=float, default=None)
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--no-cache", action="store_true", help="recompute the whole window at every step")
    args = parser.parse_args(argv)
    command = {"train": train, "sample": sample}[args.command]
    path = args.resume if args.command == "train" else args.checkpoint
    if path and not os.path.isfile(path):
        command.error(f"no checkpoint at {path}" + (": train one first (python -m solutions_lib.gpt train)"
                                                    if args.command == "sample" else ""))
    return command, args


def train_command(parser, args):
    given = {f.name: getattr(args, f.name) for f in fields(Config) if getattr(args, f.name) is not None}
    cfg = replace(recipe(process_device(distributed()[0])), **given)
    if args.resume:
        try:
            saved = read_checkpoint(args.resume)["config"]
        except ValueError as error:
            parser.error(str(error))
        cfg = Config(**(saved | {k: v for k, v in given.items() if k in ("max_steps", "max_seconds", "eval_every")}))
    try:
        check_config(cfg)
    except ValueError as error:
        parser.error(str(error))
    result = fit(cfg, checkpoint=args.checkpoint, resume=args.resume, progress=not args.no_progress,
                 compile=args.compile, start=START)
    if result["rank"] == 0:
        print(f"device {result['device']}, {result['world']} process(es): {result['steps']} steps, "
              f"{result['tokens_per_second']:.0f} tokens/s; tokenizer {cfg.tokenizer}, V = {result['tokenizer'].V}; "
              f"checkpoint {args.checkpoint}")
        print(f"held-out {result['held_out']:.2f} nats per character after {time.perf_counter() - START:.0f} s")
    if dist.is_initialized():
        dist.destroy_process_group()


def sample_command(parser, args):
    dev = process_device(0)
    try:
        model, tokenizer = load_for_sampling(args.checkpoint, dev)
        prompt = tokenizer.encode(args.prompt)
        check_sampling(args.temperature, args.top_k, args.top_p)
    except ValueError as error:
        parser.error(str(error))
    if not prompt:
        parser.error("the prompt is empty: give at least one character")
    if args.tokens < 0:
        parser.error(f"--tokens must be >= 0, not {args.tokens}")
    generator = torch.Generator(dev).manual_seed(args.seed)
    ids = generate(model, torch.tensor([prompt], device=dev), args.tokens, use_cache=not args.no_cache,
                   temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, generator=generator)
    print(tokenizer.decode(ids[0].tolist()))


def main(argv=None):
    parser, args = _arguments(argv)
    if args.command == "train":
        train_command(parser, args)
    else:
        sample_command(parser, args)


if __name__ == "__main__":
    main()
