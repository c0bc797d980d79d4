"""Mistakes nobody catalogued: generic mutations of every exercise's reference (tests/generic_mutations.py),
each checked as a learner's code is. A wrong name is worse than none: there are none; and in every notebook
at least 90 % are named (about 30 s for all ten notebooks)."""
from generic_mutations import markdown, table

from autograder import registry


def test_generic_mutations_are_named_and_never_named_wrongly():
    counts, rows = table(sorted({ex.notebook for ex in registry.all_exercises()}))
    print("\n" + markdown(counts))
    wrong = [(name, kind, said) for name, kind, verdict, said in rows if verdict == "wrong"]
    assert not wrong, wrong
    assert all(c["named"] + c["silent"] for c in counts.values()), "every notebook has mutations that change its outputs"
    low = [nb for nb, c in counts.items() if c["named"] < 0.9 * (c["named"] + c["wrong"] + c["silent"])]
    assert not low, markdown(counts)
