"""The course's thread policy (course_lib.runtime.fit_threads) against PyTorch's default, on a quiet
machine and beside two CPU-bound processes, in one run.

    python benchmarks/bench_threads.py                    # steps per second of the four models (about 5 minutes on 2 cores)
    python benchmarks/bench_threads.py --rounds 1         # a quicker, noisier look
    python benchmarks/bench_threads.py --variants course default 1 2 2-passive 2-spin1000   # more settings
    python benchmarks/bench_threads.py --mode checks      # `python -m autograder check` of notebooks 10 and 03
    python benchmarks/bench_threads.py --mode teaching    # notebook 03's full run (notebook_as_script.py)

The models, at the size and batch each notebook trains: 01's LSTM classifier (long-range task),
03's GRU encoder with an attention decoder (dates), 08's encoder-decoder Transformer (dates,
solutions_lib.train's recipe) and 10's GPT (solutions_lib.gpt's CPU recipe, on random tokens: a
step's time does not depend on the text). Each setting is timed in a process of its own, since the
OpenMP runtime reads its environment once, when it starts:

- course: what `import course_lib` chooses (course_lib.runtime.fit_threads);
- default: PyTorch as installed (SEQCOURSE_THREADS=torch: the course leaves it alone);
- N, N-passive, N-spinK: N threads; with OMP_WAIT_POLICY=PASSIVE (waiting threads sleep at once), or
  GOMP_SPINCOUNT=K (they spin K times first; GNU OpenMP's default is 300000).

"Busy" runs each timing beside `python3 -c "while True: pass"` processes (--hogs, default 2), all
of them started before it and stopped after it. The last lines give, for each model, course /
default steps per second beside the hogs (the course's target: at least 3 for 03's GRU and 08's
Transformer) and on the quiet machine (at least 0.9).
--mode checks and --mode teaching time whole commands the same way, each setting once quiet and once
busy, and give busy / quiet (the course's target for the checks: at most 2.5; for notebook 03's full
run: under 4 minutes beside the hogs, its own asserts holding). Timings are only comparable within one run.
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("01 LSTM", "03 GRU", "08 Transformer", "10 GPT")
HOG = "while True: pass"


# ---------------------------------------------------------------- one model's training step (in the child)


def update(loss, model, optimizer):
    """The notebooks' update: back-propagate, clip the gradient norm at 1, step."""
    import torch

    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def lstm_step():
    import torch
    import torch.nn.functional as F

    from course_lib.tasks import ANSWERS, LONG_RANGE_VOCAB, long_range_batch
    from solutions_lib.rnn import SequenceClassifier

    model = SequenceClassifier(len(LONG_RANGE_VOCAB), 16, 32, len(ANSWERS), cell="lstm")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(0)

    def step():
        tokens, labels = long_range_batch(32, 20, data)
        update(F.cross_entropy(model(tokens), labels), model, optimizer)
    return step


def gru_step():
    import torch
    import torch.nn.functional as F

    from course_lib.dates import date_pairs, date_vocab
    from course_lib.tokens import pad_batch
    from solutions_lib.seq2seq_attention import Seq2SeqAttention

    vocab = date_vocab()
    pairs = date_pairs(64, seed=0)
    src, _ = pad_batch([vocab.encode(s) for s, _ in pairs])
    tgt, _ = pad_batch([vocab.encode(t, bos=True, eos=True) for _, t in pairs])
    model = Seq2SeqAttention(len(vocab), d_emb=32, d_h=64)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        logits, _ = model(src, tgt[:, :-1])
        update(F.cross_entropy(logits.reshape(-1, len(vocab)), tgt[:, 1:].reshape(-1)), model, optimizer)
    return step


def transformer_step():
    from solutions_lib.train import Config, build_model, build_optimizer, task_data, trim
    from solutions_lib.training import train_step

    cfg = Config(n_train=2000, n_test=10)
    vocab, (src, tgt), _ = task_data(cfg)
    s, t = trim(src[:cfg.batch_size]), trim(tgt[:cfg.batch_size])
    model = build_model(cfg, vocab)
    optimizer, scheduler = build_optimizer(model, cfg)
    return lambda: train_step(model, optimizer, scheduler, s, t, vocab.bos_id, vocab.pad_id, cfg.smoothing, cfg.clip)


def gpt_step():
    import torch

    from course_lib.gpt_training import build_optimizer
    from course_lib.training import optimizer_step, precision
    from solutions_lib.gpt.data import get_batch
    from solutions_lib.gpt.train import build_model, recipe

    cfg = recipe(torch.device("cpu"))
    data = torch.randint(cfg.vocab_size, (100_000,), generator=torch.Generator().manual_seed(0))
    model = build_model(cfg, cfg.vocab_size)
    optimizer = build_optimizer(model, cfg)
    autocast, scaler = precision(torch.device("cpu"), cpu=True, enabled=cfg.bf16)
    sampler = torch.Generator().manual_seed(0)

    def step():
        x, y = get_batch(data, cfg.block_size, cfg.batch_size, generator=sampler)
        with autocast():
            _, loss = model(x, y)
        optimizer_step(loss, model, optimizer, scaler, cfg.clip)
    return step


STEPS = dict(zip(MODELS, (lstm_step, gru_step, transformer_step, gpt_step)))


def variant_env(variant):
    """The environment a child runs under for a setting: course, default, N or N-passive."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "SEQCOURSE_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if variant == "default":
        env["SEQCOURSE_THREADS"] = "torch"
    elif variant != "course":
        threads, _, wait = variant.partition("-")
        env["SEQCOURSE_THREADS"] = "torch"
        env["OMP_NUM_THREADS"] = threads
        if wait == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        elif wait.startswith("spin"):
            env["GOMP_SPINCOUNT"] = wait[4:]
    return env


def child(model, seconds, min_steps):
    """Print one JSON line: `model`'s training steps and the seconds they took, after 3 untimed steps."""
    import torch

    import course_lib  # noqa: F401  (applies the course's thread policy, unless SEQCOURSE_THREADS=torch)

    torch.manual_seed(0)
    step = STEPS[model]()
    for _ in range(3):
        step()
    n, start = 0, time.perf_counter()
    while n < min_steps or time.perf_counter() - start < seconds:
        step()
        n += 1
    print(json.dumps({"steps": n, "seconds": time.perf_counter() - start, "threads": torch.get_num_threads()}))


# ---------------------------------------------------------------- the table (in the parent)


def timed(model, variant, args):
    out = subprocess.run([sys.executable, __file__, "--child", model, "--seconds", str(args.seconds),
                          "--min-steps", str(args.min_steps)], env=variant_env(variant), capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{model} ({variant}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def hogs(n):
    """n CPU-bound processes, running until the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n)]
    try:
        time.sleep(0.5 if n else 0)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run_scene(args, n_hogs):
    """{(model, variant): (steps per second over all rounds, threads at the end of the last)}, beside
    `n_hogs` busy loops. Each round reverses the order of the variants, so drift hurts them alike."""
    steps, seconds, threads = {}, {}, {}
    with hogs(n_hogs):
        for r in range(args.rounds):
            for i, model in enumerate(args.models):
                for variant in args.variants if (r + i) % 2 == 0 else args.variants[::-1]:
                    got = timed(model, variant, args)
                    key = model, variant
                    steps[key] = steps.get(key, 0) + got["steps"]
                    seconds[key] = seconds.get(key, 0.0) + got["seconds"]
                    threads[key] = got["threads"]
    return {key: (steps[key] / seconds[key], threads[key]) for key in steps}


def steps_table(args):
    timed(args.models[0], "default", args)  # a first process warms the caches; it is not counted
    scenes = {"quiet": run_scene(args, 0), "busy": run_scene(args, args.hogs)}
    head = f"{'model':<16}" + "".join(f"{scene + ' ' + v:>20}" for scene in scenes for v in args.variants)
    print(f"\nsteps per second over {args.rounds} x {args.seconds:g} s or more (threads at the end)\n" + head)
    for model in args.models:
        cells = [f"{rate:.1f} ({threads})" for scene in scenes.values() for rate, threads in (scene[model, v] for v in args.variants)]
        print(f"{model:<16}" + "".join(f"{c:>20}" for c in cells))
    print("\ncourse / default steps per second (targets: busy >= 3 for 03 and 08, quiet >= 0.9)")
    for model in args.models:
        ratio = {scene: r[model, "course"][0] / r[model, "default"][0] for scene, r in scenes.items()}
        print(f"{model:<16} busy {ratio['busy']:5.2f}   quiet {ratio['quiet']:5.2f}")


COMMANDS = {
    "checks": {f"check {nb[:2]}": ["-m", "autograder", "check", f"solutions/{nb}/{nb}.ipynb"]
               for nb in ("10_a_gpt_of_your_own", "03_attention_mechanisms")},
    "teaching": {"notebook 03, full run": ["benchmarks/notebook_as_script.py",
                                          "solutions/03_attention_mechanisms/03_attention_mechanisms.ipynb"]},
}


def commands_table(args):
    """Wall seconds of each command of the mode, per setting, quiet then busy."""
    for name, command in COMMANDS[args.mode].items():
        for variant in args.variants:
            took = {}
            for scene, n in (("quiet", 0), ("busy", args.hogs)):
                with hogs(n):
                    start = time.perf_counter()
                    run = subprocess.run([sys.executable, *command], cwd=ROOT, env=variant_env(variant), capture_output=True, text=True)
                    took[scene] = time.perf_counter() - start
                if run.returncode:
                    print(f"{name} ({variant}, {scene}) exited {run.returncode}:\n{(run.stdout + run.stderr)[-2000:]}")
            print(f"{name:<24}{variant:>10}   quiet {took['quiet']:6.1f} s   busy {took['busy']:6.1f} s   "
                  f"busy / quiet {took['busy'] / took['quiet']:.2f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["steps", "checks", "teaching"], default="steps")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), metavar="MODEL")
    parser.add_argument("--variants", nargs="+", default=["course", "default"])
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound processes beside the busy timings")
    parser.add_argument("--seconds", type=float, default=4.0, help="time each setting at least this long, each round")
    parser.add_argument("--rounds", type=int, default=2, help="timings of each setting, in alternating order")
    parser.add_argument("--min-steps", type=int, default=5, help="and at least this many steps")
    parser.add_argument("--child", choices=MODELS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.seconds, args.min_steps)
    if args.mode == "steps" and not {"course", "default"} <= set(args.variants):
        parser.error("--variants must include course and default")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cpus} CPU(s) of affinity, load {os.getloadavg()[0]:.1f} before the run; busy = beside {args.hogs} "
          f"`python3 -c \"{HOG}\"`", flush=True)
    if args.mode == "steps":
        steps_table(args)
    else:
        commands_table(args)


if __name__ == "__main__":
    main()
