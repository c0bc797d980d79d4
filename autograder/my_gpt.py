"""Your own GPT of notebooks 10 and 11, trained and sampled from the command line.

    python -m autograder.my_gpt train                     # the recipe for the device found: CPU 72 s, GPU 45 s
    python -m autograder.my_gpt train --model gpt   # notebook 10's GPT and recipe, once 11's checks pass
    python -m autograder.my_gpt train --d-model 96 --N 3  # another size
    python -m autograder.my_gpt sample --prompt "ROMEO:" --temperature 0.8 --top-k 40
    python -m autograder.my_gpt sample --prompt "ROMEO:" --beam 4 --tokens 60   # the likeliest text a beam finds

Run it in your course folder (the one that holds 10_a_gpt_of_your_own/) or in the notebook's own
folder. It reads your saved notebook 10 and, as `yours` does in the notebooks, uses your exercises
once their checks have passed (save the notebook after running them): to train, your GPT (with
your Block, and the blocks of notebooks 05-07 where theirs passed), get_batch and nats_per_char;
to sample, your GPT and generate (with sample_next and KVCache), and with --beam your beam_generate. It tokenizes with your notebook 09
encode and decode where their checks passed, with the course's otherwise. The training loop, the
recipe and the checkpoint are those of the course's reference command (course_lib.gpt_training).

Once the checks of your notebook 11's ModernGPT and split_parameters pass (saved, in the folder beside
10_a_gpt_of_your_own/), it trains your ModernGPT with notebook 11's recipe instead: Muon on the matrices your
split_parameters picks (torch.optim.Muon, whose update your newton_schulz was checked against), AdamW on the rest.
"""
import time

START = time.perf_counter()  # the command's start, from which its budget counts

import os  # noqa: E402
from pathlib import Path  # noqa: E402

from course_lib import gpt as course_gpt  # noqa: E402
from course_lib.gpt_training import Missing, Parts, main  # noqa: E402
from autograder.yours import NotYours, load  # noqa: E402

NOTEBOOK = "10_a_gpt_of_your_own"
MODERN = "11_a_gpt_as_trained_today"
PROG = "python -m autograder.my_gpt"
NEEDED = {"train": ("GPT", "get_batch", "nats_per_char"), "sample": ("GPT", "generate")}


def notebook_folder(here=None):
    """The folder of your saved notebook 10: here (default: the current folder) or here/10_a_gpt_of_your_own."""
    here = Path(here or os.getcwd())
    for folder in (here, here / NOTEBOOK):
        if (folder / f"{NOTEBOOK}.ipynb").is_file():
            return folder
    raise NotYours(f"no {NOTEBOOK}.ipynb in {here} or in {here / NOTEBOOK}: run this command in your course folder")


def your_parts(command, parser, here=None):
    """Parts made of your exercises for `command` (train or sample); the parser's error, naming what is left, if
    your notebook cannot give them."""
    try:
        folder = notebook_folder(here)
    except NotYours as e:
        parser.error(str(e))
    try:
        yours = load(NEEDED[command], folder)
    except NotYours as e:
        parser.error(f"your notebook 10 cannot {command} yet: {e}. Finish those exercises, run their checks, "
                     f"save the notebook, and run this again")
    try:
        tokenizer = load(("encode", "decode"), folder)
        said = "your encode and decode (09)"
    except NotYours as e:
        tokenizer = {"encode": course_gpt.encode, "decode": course_gpt.decode}
        said = f"the course's encode and decode ({e})"
    missing = _raising(RuntimeError(f"{PROG} {command} does not use this exercise"))
    beam = missing
    if command == "sample":  # needed for --beam only
        try:
            beam = yours["beam_generate"] = load(("beam_generate",), folder)["beam_generate"]
        except NotYours as e:
            beam = _raising(Missing(f"your notebook 10 cannot search with a beam yet: {e}. Finish that exercise, run its "
                                    "check, save the notebook, and run this again"))
    modern, said_modern = _modern(folder)
    print(f"{command}: your {', '.join(n for n in (*NEEDED[command], 'beam_generate') if n in yours)} (10){said_modern}; "
          f"tokenizer: {said}", flush=True)
    return Parts(GPT=yours["GPT"], get_batch=yours.get("get_batch", missing), nats_per_char=yours.get("nats_per_char", missing),
                 generate=yours.get("generate", missing), beam_generate=beam, encode=tokenizer["encode"],
                 decode=tokenizer["decode"], prog=PROG, **modern)


def _modern(folder):
    """Your ModernGPT and split_parameters of notebook 11, once their checks pass: (Parts' fields, what to say)."""
    for place in (folder.parent / MODERN, folder / MODERN, folder):
        if (place / f"{MODERN}.ipynb").is_file():
            try:
                found = load(("ModernGPT", "split_parameters"), place)
            except NotYours as e:
                return {}, f"; notebook 10's recipe, since your notebook 11 cannot train yet ({e})"
            return found, ", and your ModernGPT and split_parameters (11) with notebook 11's recipe"
    return {}, ""


def _raising(error):
    """What stands in for an exercise the command cannot use: calling it raises `error`."""
    def missing(*args, **kwargs):
        raise error
    return missing


if __name__ == "__main__":
    main(your_parts, start=START, prog=PROG)
