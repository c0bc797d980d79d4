"""The text of notebook 10: Tiny Shakespeare, shipped with the course (course_lib/data/README.md),
and its split into a training part and a held-out part."""
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def shakespeare():
    """Tiny Shakespeare, char-rnn's input.txt: a str of 1,115,394 characters."""
    return (DATA / "tinyshakespeare.txt").read_text(encoding="utf-8")


def split(text, fraction=0.9):
    """Cut `text` by characters, as nanoGPT does: (train, held_out).

    train is the first int(len(text) * fraction) characters, held_out the rest;
    train + held_out == text.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie strictly between 0 and 1, not {fraction!r}")
    n = int(len(text) * fraction)
    return text[:n], text[n:]
