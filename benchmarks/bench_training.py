"""Training speed of solutions_lib's Transformer against torch.nn.Transformer, as ratios.

    python benchmarks/bench_training.py --mode step     # (a) one training step, same size, same batch
    python benchmarks/bench_training.py --mode recipe   # (b) wall time to 99% exact match on held-out dates
    python benchmarks/bench_training.py                 # both

(a) times forward + backward + AdamW step of the same encoder-decoder at the
same size (by default the recipe's), built from solutions_lib.transformer and from nn.Transformer
(solutions_lib.train.TorchTransformer: same embeddings, positions and output
layer), and prints  solutions_lib / torch  (target: at most 0.9).
(b) runs the notebook 08 recipe (solutions_lib.train.fit) with each model until
the held-out exact match reaches 99%, for seeds 0 to --seeds - 1, and prints the
ratio of the mean wall times (target: at most 0.8). The step that first reaches
99% moves by 50 steps or more from seed to seed, and even between two runs of one
seed (the allocator's state changes the rounding), so one run per model measures
luck as much as speed. It also reports target tokens per second.
Each mode prints its ratio on its last line. Timings are only comparable within one run.
"""
import argparse
import time

import torch

from solutions_lib.train import Config, build_model, build_optimizer, fit, task_data, trim
from solutions_lib.training import label_smoothed_cross_entropy, make_masks, shift_right


def step_time(cfg, batches, repeats, dev):
    torch.manual_seed(0)
    vocab = batches["vocab"]
    model = build_model(cfg, vocab).to(dev)
    optimizer, scheduler = build_optimizer(model, cfg)
    model.train()

    def step(s, t):
        tgt_in = shift_right(t, vocab.bos_id)
        src_mask, tgt_mask = make_masks(s, tgt_in, vocab.pad_id)
        loss = label_smoothed_cross_entropy(model(s, tgt_in, src_mask, tgt_mask), t, cfg.smoothing, vocab.pad_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        optimizer.step()
        scheduler.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    times = []
    for i, (s, t) in enumerate(batches["data"] * repeats):
        start = time.perf_counter()
        step(s.to(dev), t.to(dev))
        if i >= 3:  # warm-up steps are not timed
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def bench_step(args, dev):
    print(f"(a) training step, device {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    cfg = Config(d_model=args.d_model, h=args.heads, N=args.layers, d_ff=args.d_ff, n_train=4000)
    vocab, (src, tgt), _ = task_data(cfg)
    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(4):
        idx = torch.randint(len(src), (args.batch_size,), generator=g)
        data.append((trim(src[idx]), trim(tgt[idx])))
    batches = {"vocab": vocab, "data": data}
    ours, theirs = [], []
    for _ in range(args.rounds):  # alternate, so that a busy machine hurts both alike
        ours.append(step_time(Config(**{**cfg.__dict__, "arch": "ours"}), batches, args.repeats, dev))
        theirs.append(step_time(Config(**{**cfg.__dict__, "arch": "torch"}), batches, args.repeats, dev))
    a, b = min(ours), min(theirs)
    print(f"d_model={cfg.d_model} h={cfg.h} N={cfg.N} d_ff={cfg.d_ff} B={args.batch_size}: "
          f"solutions_lib {a * 1e3:.1f} ms, nn.Transformer {b * 1e3:.1f} ms")
    print(f"training step time ratio (solutions_lib / torch.nn.Transformer): {a / b:.2f}")


def bench_recipe(args, dev):
    print(f"(b) notebook 08 recipe to {args.target:.0%} held-out exact match on dates, device {dev}, "
          f"seeds 0 to {args.seeds - 1}")
    seconds = {"ours": [], "torch": []}
    for seed in range(args.seeds):  # alternate, so that a busy machine hurts both alike
        for arch in seconds:
            cfg = Config(arch=arch, seed=seed, target=args.target, max_steps=args.max_steps)
            result = fit(cfg, progress=False, log=lambda line: None)
            em = result["history"]["exact_match"][-1]
            seconds[arch].append(result["seconds"] if result["reached"] else float("inf"))
            print(f"seed {seed} {arch:>5}: {result['steps']} steps, {result['seconds']:.1f} s, exact match {em:.4f}"
                  f"{'' if result['reached'] else ' (target NOT reached)'}, {result['tokens_per_second']:.0f} target tokens/s")
    ours, theirs = sum(seconds["ours"]), sum(seconds["torch"])
    print(f"mean time to {args.target:.0%}: solutions_lib {ours / args.seeds:.1f} s, nn.Transformer {theirs / args.seeds:.1f} s")
    print(f"time to {args.target:.0%} ratio (solutions_lib / torch.nn.Transformer): {ours / theirs:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["step", "recipe", "both"], default="both")
    recipe = Config()  # by default the step is timed at the size of the recipe's model and batch
    parser.add_argument("--d-model", type=int, default=recipe.d_model)
    parser.add_argument("--heads", type=int, default=recipe.h)
    parser.add_argument("--layers", type=int, default=recipe.N)
    parser.add_argument("--d-ff", type=int, default=recipe.d_ff)
    parser.add_argument("--batch-size", type=int, default=recipe.batch_size)
    parser.add_argument("--seeds", type=int, default=3, help="recipe runs per model, seeds 0, 1, ...")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--target", type=float, default=0.99)
    parser.add_argument("--max-steps", type=int, default=6000)
    args = parser.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.mode in ("step", "both"):
        bench_step(args, dev)
    if args.mode in ("recipe", "both"):
        bench_recipe(args, dev)


if __name__ == "__main__":
    main()
