"""Notebook 11's measurements: each change to notebook 10's GPT alone and together, at a fixed number of steps.

    python benchmarks/bench_modern.py                                  # the notebook's table: 9 rows, seeds 0-2, 600 steps
    python benchmarks/bench_modern.py --steps 1900 --rows modern:muon --seeds 0,1,2
    python benchmarks/bench_modern.py --steps 1000 --rows modern:muon --set lr=0.005 --set muon_lr=0.03

A row is Config.model (gpt, modern, or changes joined by +), with ":muon" for Muon on the blocks' matrices; "gpt" is the
reference's notebook 10 GPT and "modern" the reference's ModernGPT, both with fused kernels (solutions_lib.fast), the
others course_lib.modern.VariantGPT. Each run trains notebook 10's CPU recipe (course_lib.gpt_training.CPU) for exactly
--steps steps, its schedule over them, so that a figure does not depend on the machine's speed or load, and prints one
JSON line: the row, the seed, the held-out nats per character (the fair evaluation) and the seconds it trained.
"""
import argparse
import json
import time
from dataclasses import fields, replace

from course_lib import gpt_training
from solutions_lib.gpt import train

TABLE = ["gpt", "rms_norm", "rope", "rope+qk_norm", "relu2", "zero_init", "gpt:muon",
         "rms_norm+rope+qk_norm+relu2+zero_init", "rms_norm+rope+qk_norm+relu2+zero_init:muon"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rows", default=",".join(TABLE))
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a Config field for every row")
    args = parser.parse_args(argv)
    types = {f.name: type(f.default) for f in fields(gpt_training.Config)}
    given = {}
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in types:
            parser.error(f"--set {item}: Config has no field {name!r}")
        given[name] = types[name](value)
    cfg = replace(gpt_training.CPU, max_seconds=0, max_steps=args.steps, **given)
    data = train.load_data(cfg)
    for row in args.rows.split(","):
        model, _, optimizer = row.partition(":")
        for seed in (int(s) for s in args.seeds.split(",")):
            run_cfg = replace(cfg, model=model, muon=optimizer == "muon", seed=seed)
            gpt_training.check_config(run_cfg)
            began = time.perf_counter()
            run = train.fit(run_cfg, progress=False, data=data, log=lambda line: None)
            print(json.dumps({"row": row, "seed": seed, "steps": run["steps"], "held_out": round(run["held_out"], 4),
                              "trained_seconds": round(run["trained_seconds"], 1),
                              "seconds": round(time.perf_counter() - began, 1), **given}), flush=True)


if __name__ == "__main__":
    main()
